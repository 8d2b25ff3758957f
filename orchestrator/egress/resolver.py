"""Name resolution for the egress proxy: the proxy resolves, the container never does.

The proxy resolves a name once, checks every address it got, and connects to one
of exactly those addresses, so there is no window for DNS rebinding between the
check and the connect. Which addresses are refused is the resolver's `refusal`
(by default `addresses.refusal`: loopback, link-local, private, ...).

`StaticResolver` maps names to fixed addresses and lets loopback through: it exists
for tests and benchmarks, which point test domains at servers on 127.0.0.1. It is
only ever passed in-process (`EgressService(resolver=...)`); no setting, flag or
environment variable selects it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping

from orchestrator.egress.addresses import IPAddress, parse_ip
from orchestrator.egress.addresses import refusal as default_refusal

RESOLVE_TIMEOUT_S = 10.0
"""Longest a name lookup may take before the connection is refused."""
MAX_ADDRESSES = 16
"""Addresses kept per name (the rest are not tried)."""


class ResolveError(OSError):
    """A name did not resolve; the message says why."""


class Resolver:
    """The system resolver (getaddrinfo in a worker thread), with the default refusals."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
            )
        except TimeoutError as exc:
            raise ResolveError(f"{host} did not resolve within {RESOLVE_TIMEOUT_S:g} s") from exc
        except (socket.gaierror, UnicodeError) as exc:
            raise ResolveError(f"{host} does not resolve ({exc})") from exc
        found: list[IPAddress] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = parse_ip(str(sockaddr[0]))
            if address is not None and address not in found:
                found.append(address)
        if not found:
            raise ResolveError(f"{host} has no addresses")
        return found[:MAX_ADDRESSES]

    def refusal(self, address: IPAddress) -> str | None:
        """Why `address` may not be reached unless a rule names it; None when it may."""
        return default_refusal(address)


class StaticResolver(Resolver):
    """Tests and benchmarks only: fixed answers, and loopback (127.0.0.0/8) allowed so
    test servers can stand in for real hosts. Every other refusal still applies."""

    def __init__(self, names: Mapping[str, str | list[str]]) -> None:
        self.names = {k.lower(): [v] if isinstance(v, str) else list(v) for k, v in names.items()}

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        texts = self.names.get(host.lower())
        if not texts:
            raise ResolveError(f"{host} does not resolve (not in the test resolver)")
        found = [a for a in (parse_ip(t) for t in texts) if a is not None]
        if not found:
            raise ResolveError(f"{host} has no addresses")
        return found

    def refusal(self, address: IPAddress) -> str | None:
        if address.version == 4 and address.is_loopback:
            return None
        return default_refusal(address)
