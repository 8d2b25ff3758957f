"""Who may talk to the page: the secret in the URL, the Host and Origin checks,
and the headers every answer carries.

A browser on the same machine runs pages from any web site, and those pages can
send requests to 127.0.0.1. Three checks keep them out:

- **The secret.** Every path is under `/s/SECRET/`; the secret is made fresh for
  each server (`new_secret`), printed once, kept only in memory and compared in
  constant time. A request without it (or with another server's) gets an empty
  404, as if nothing were there.
- **Host.** A DNS-rebinding page reaches 127.0.0.1 under its own name; the Host
  header then names that site, not this server. Only the names this server was
  bound as are answered (421 otherwise).
- **Origin.** A cross-site form or fetch carries its own Origin (and
  `Sec-Fetch-Site: cross-site`). A request that changes anything must come from
  this server's own origin; a reading one may come from nowhere else either.

Every answer carries a strict Content-Security-Policy (scripts and styles only
from this server, nothing inline, no frames, no forms, no images), no-sniff, no
referrer (the URL holds the secret) and no caching.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from orchestrator.errors import ConfigError

SECRET_BYTES = 24
"""Random bytes in a server's secret (32 URL-safe characters)."""

DEFAULT_HOST = "127.0.0.1"
"""Where the page listens unless told otherwise."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'none'; font-src 'none'; object-src 'none'; media-src 'none'; "
    "frame-src 'none'; worker-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
"""Nothing runs or loads but this server's own script and style; no inline code."""

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
"""Sent with every answer, refusals included."""

SAFE_METHODS = frozenset({"GET", "HEAD"})
"""Methods that change nothing; every other one needs this server's own Origin."""


class UnsafeListenError(ConfigError, ValueError):
    """The page would listen beyond this machine without TLS or without being asked."""


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ListenConfig:
    """Where the page listens and how (`--ui-listen`, `--ui-tls-cert`, `--ui-tls-key`)."""

    host: str = DEFAULT_HOST
    """The address to bind; anything but loopback needs TLS."""
    port: int = 0
    """0 picks a free port."""
    tls_cert: Path | None = None
    """PEM certificate chain (with `tls_key`): the page is served over HTTPS."""
    tls_key: Path | None = None
    """PEM private key of `tls_cert`."""
    names: tuple[str, ...] = field(default_factory=tuple)
    """Further host names browsers may use for it (the Host check), e.g. a DNS name."""

    def check(self) -> None:
        """Raises UnsafeListenError for a non-loopback address without TLS, and
        ConfigError for half a TLS configuration."""
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("the page's TLS needs both --ui-tls-cert and --ui-tls-key")
        if not is_loopback(self.host) and self.tls_cert is None:
            raise UnsafeListenError(
                f"the page would listen on {self.host}, beyond this machine, in plain HTTP: "
                "anyone on the network could read the secret in its URL. Give "
                "--ui-tls-cert and --ui-tls-key, or leave --ui-listen at 127.0.0.1"
            )

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `HOST`, `[V6]:PORT`, `:PORT` or `PORT` as (host, port)."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    elif value.isdigit():
        host, port = "", value
    else:
        host, port = value, ""
    try:
        number = int(port) if port else 0
    except ValueError:
        raise ConfigError(f"--ui-listen {value!r}: the port must be a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"--ui-listen {value!r}: the port must be 0-65535")
    return host or DEFAULT_HOST, number


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Guard:
    """The checks above as an aiohttp middleware; `bind` tells it the port once
    the server listens (the Host and Origin it accepts name that port)."""

    def __init__(self, secret: str, listen: ListenConfig) -> None:
        self.secret = secret
        self.listen = listen
        self._hosts: frozenset[str] = frozenset()
        self._origins: frozenset[str] = frozenset()

    def bind(self, port: int) -> None:
        names = {self.listen.host, *self.listen.names}
        if is_loopback(self.listen.host):
            names |= {"127.0.0.1", "localhost"}
        hosts = {f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names}
        self._hosts = frozenset(h.lower() for h in hosts)
        self._origins = frozenset(f"{self.listen.scheme}://{h}" for h in self._hosts)

    @property
    def prefix(self) -> str:
        return f"/s/{self.secret}/"

    def refusal(self, request: web.Request) -> web.Response | None:
        """The refusal for a request that fails a check, or None when it passes."""
        host = (request.headers.get("Host") or "").lower()
        if host not in self._hosts:
            return _empty(421)
        if not _has_secret(request.path, self.secret):
            return _empty(404)
        origin = request.headers.get("Origin")
        site = request.headers.get("Sec-Fetch-Site")
        if origin is not None and origin.lower() not in self._origins:
            return _empty(403)
        # A link to the page followed from another site (a chat, a CI log) opens it;
        # everything the page then reads or sends must come from the page itself.
        opening = request.method == "GET" and request.path == self.prefix
        if site is not None and site not in ("same-origin", "none") and not opening:
            return _empty(403)
        if request.method not in SAFE_METHODS and origin is None:
            return _empty(403)  # a change must say where it comes from
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = self.refusal(request)
        if refused is not None:
            return refused
        try:
            return await handler(request)
        except web.HTTPException as exc:  # the router's 404/405: said plainly, no page
            return web.Response(status=exc.status, text=exc.reason)

    def install(self, app: web.Application) -> None:
        """The checks, and the headers on every answer (streams too: a signal runs
        before any response's headers are sent)."""
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(_add_headers)


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def _has_secret(path: str, secret: str) -> bool:
    parts = path.split("/", 3)
    if len(parts) < 3 or parts[1] != "s":
        return False
    return hmac.compare_digest(parts[2].encode(), secret.encode())


def _empty(status: int) -> web.Response:
    return web.Response(status=status, body=b"")
