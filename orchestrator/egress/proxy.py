"""The host side of one task's egress: an HTTP proxy on a Unix socket.

Speaks just enough HTTP/1.1 to take one request per connection:
- `CONNECT host:port`: decided, resolved, connected to the checked address, then
  `200`; the first TLS record from the client must be a ClientHello whose SNI is
  the CONNECT host (refused with a TLS `unrecognized_name` alert otherwise, and on
  port 443 also when there is no SNI or no TLS at all). No interception: bytes are
  relayed as they are.
- absolute-form plain HTTP (`GET http://host/path HTTP/1.1`): decided the same way,
  sent upstream in origin form with `Connection: close`, followed by exactly the
  body its `Content-Length` announces and nothing else: a second request pipelined
  behind the first (with another `Host`, for another virtual host behind the same
  address) never reaches the upstream. Chunked request bodies are refused (`411`;
  HTTPS through CONNECT carries them).
Anything refused gets `403` with one line naming the rule or mode and what to do
(an `X-Warden-Egress` header carries the same line). Bytes and connections are
metered per task (`limits.Meter`); crossing a cap closes the connection.

Own code rather than an HTTP framework: the proxy must read exactly the request
head and then hand the raw socket to a byte relay (CONNECT, and plain HTTP after
the head); aiohttp's server cannot give the socket back, and a forward proxy is
a few dozen lines of parsing, bounded below. A little over 400 lines, one idea:
one connection's life (head, decision, connect, SNI check, metered relay, refusal).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.broker.listener import peer_uid
from orchestrator.egress.decide import Decider, Verdict
from orchestrator.egress.limits import Destination, Meter
from orchestrator.egress.sni import (
    RECORD_HEADER_BYTES,
    ClientHelloError,
    parse_client_hello,
    record_length,
)

log = logging.getLogger(__name__)

SOCKET_NAME = "egress.sock"
"""The proxy's socket, beside the broker's in the task's socket directory."""
SOCKET_MODE = 0o660
MAX_HEAD_BYTES = 32 * 1024
"""Longest request head (request line + headers) read."""
HEAD_TIMEOUT_S = 30.0
"""A request head must arrive within this."""
CONNECT_TIMEOUT_S = 15.0
"""Longest the proxy waits for an upstream TCP connect (each address)."""
HELLO_TIMEOUT_S = 30.0
"""The TLS ClientHello must follow a CONNECT's 200 within this."""
IDLE_TIMEOUT_S = 300.0
"""A relay with no bytes either way for this long is closed."""
CHUNK_BYTES = 256 * 1024
WRITE_BUFFER_BYTES = 1024 * 1024
"""Bytes queued towards one side before the relay waits for it (asyncio's default,
64 KiB, makes every other read wait for a drain)."""
TLS_ALERT_UNRECOGNIZED_NAME = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70])
"""A fatal TLS alert (unrecognized_name): what a TLS client understands after `200`."""
HOP_HEADERS = frozenset(
    {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "te", "upgrade"}
)

Record = Callable[[Verdict, str], Awaitable[None]]
"""Called with every decision and the request method (audit and events)."""
Notice = Callable[[str, str], Awaitable[None]]
"""Called with (kind, message) when something should be reported once."""


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class EgressProxy:
    """One task's proxy, listening at `socket_dir/egress.sock`."""

    def __init__(
        self,
        socket_dir: Path,
        decider: Decider,
        meter: Meter,
        *,
        allowed_uids: frozenset[int],
        record: Record,
        notice: Notice,
    ) -> None:
        self.path = socket_dir / SOCKET_NAME
        self.decider = decider
        self.meter = meter
        self.allowed_uids = allowed_uids
        self.record = record
        self.notice = notice
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._cut_reported = False

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._accepted, path=str(self.path), limit=MAX_HEAD_BYTES
        )
        # Like the broker's: the directory's group is the sandbox's gid, and only the
        # sandbox (and this process) may connect; the peer check follows on accept.
        with contextlib.suppress(PermissionError):
            os.chown(self.path, -1, self.path.parent.stat().st_gid)
        os.chmod(self.path, SOCKET_MODE)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:  # a proxy bug must not take the run down
            log.exception("egress proxy: connection failed")
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = _peer_uid(sock) if sock is not None else None
        if uid not in self.allowed_uids:
            await self.notice("egress_refused_peer", f"a process with uid {uid} was refused")
            return
        why = self.meter.admit()
        if why is not None:
            await self._refuse(writer, 429, f"refused: {why} is reached")
            return
        try:
            await self._request(reader, writer)
        finally:
            self.meter.closed()

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            method, host, port, upstream_head, body_bytes = _parse_head(head)
        except _Refused as exc:
            await self._refuse(writer, exc.status, exc.reason)
            return
        except (asyncio.LimitOverrunError, ValueError):
            await self._refuse(writer, 431, f"request head larger than {MAX_HEAD_BYTES} bytes")
            return
        verdict = await self.decider.decide(host, port)
        dest = self.meter.destination(verdict.host, verdict.port)
        if verdict.behavior == "deny":
            dest.refused += 1
            await self.record(verdict, method)
            await self._refuse(writer, 403, f"warden egress: {verdict.reason}")
            return
        try:
            up_reader, up_writer = await _connect(verdict)
        except OSError as exc:
            dest.refused += 1
            failed = Verdict(
                "deny", verdict.host, verdict.port,
                f"could not connect to {verdict.host}:{verdict.port} ({exc.strerror or exc})",
                "proxy: connect", "proxy", verdict.policy,
            )  # fmt: skip
            await self.record(failed, method)
            await self._refuse(writer, 502, f"warden egress: {failed.reason}")
            return
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
                hello = await self._client_hello(reader, writer, verdict)
                if hello is None:
                    return
                upstream_head = hello
            await self.record(verdict, method)
            dest.connections += 1
            if not self._send_up(dest, up_writer, upstream_head):
                return
            await self._relay(reader, writer, up_reader, up_writer, dest, body_bytes)
        finally:
            up_writer.close()

    async def _client_hello(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, verdict: Verdict
    ) -> bytes | None:
        """The first TLS record, when its SNI is the CONNECT host; else refused (None)."""
        try:
            header = await asyncio.wait_for(
                reader.readexactly(RECORD_HEADER_BYTES), HELLO_TIMEOUT_S
            )
            if header[0] != 0x16 and verdict.port != 443:
                return header  # not TLS, on a port where plain protocols are fine
            body = await asyncio.wait_for(
                reader.readexactly(record_length(header)), HELLO_TIMEOUT_S
            )
            hello = parse_client_hello(header + body)
        except ClientHelloError as exc:
            await self._refuse_tls(writer, verdict, f"the TLS ClientHello is refused: {exc}")
            return None
        if hello.server_name is None and verdict.port == 443:
            await self._refuse_tls(
                writer, verdict, "the TLS ClientHello names no server (SNI); send the host name"
            )
            return None
        if hello.server_name is not None and hello.server_name != verdict.host:
            await self._refuse_tls(
                writer, verdict,
                f"the TLS server name {hello.server_name[:100]!r} differs from the CONNECT host "
                f"{verdict.host}; a tunnel reaches only the host it was allowed for",
            )  # fmt: skip
            return None
        return header + body

    async def _refuse_tls(
        self, writer: asyncio.StreamWriter, verdict: Verdict, reason: str
    ) -> None:
        refused = Verdict(
            "deny", verdict.host, verdict.port, reason, "proxy: SNI check", "proxy", verdict.policy
        )
        self.meter.destination(verdict.host, verdict.port).refused += 1
        await self.record(refused, "CONNECT")
        writer.write(TLS_ALERT_UNRECOGNIZED_NAME)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    def _send_up(self, dest: Destination, up: asyncio.StreamWriter, data: bytes) -> bool:
        allowed = self.meter.allow_up(dest, len(data))
        up.write(data[:allowed])
        return allowed == len(data)

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        dest: Destination,
        body_bytes: int | None,
    ) -> None:
        """Relay both ways; client to upstream only `body_bytes` when it is known
        (plain HTTP), until EOF otherwise (a CONNECT tunnel)."""
        def up(n: int) -> int:
            return self.meter.allow_up(dest, n)

        def down(n: int) -> int:
            return self.meter.allow_down(dest, n)

        for w in (writer, up_writer):
            w.transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
        pumps = [
            asyncio.create_task(_pump(reader, up_writer, up, body_bytes)),
            asyncio.create_task(_pump(up_reader, writer, down)),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            # One side ended normally: let the other finish (a response after the
            # request's end); a cap or an error ends both.
            if all(t.exception() is None and t.result() for t in done):
                await asyncio.wait(pumps)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        if self.meter.cut is not None and not self._cut_reported:
            self._cut_reported = True
            await self.notice("egress_limit", f"egress cut: {self.meter.cut} was crossed")

    async def _refuse(self, writer: asyncio.StreamWriter, status: int, reason: str) -> None:
        line = " ".join(reason.split())[:1000]
        body = (line + "\n").encode("utf-8", "replace")
        phrase = {403: "Forbidden", 411: "Length Required", 429: "Too Many Requests", 431: "Too Large"}.get(
            status, "Bad Gateway" if status == 502 else "Bad Request"
        )
        header_line = line.encode("ascii", "replace").decode("ascii")
        writer.write(
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"X-Warden-Egress: {header_line}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode("ascii")
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()


async def _pump(
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    allow: Callable[[int], int],
    length: int | None = None,
) -> bool:
    """Copy until EOF (True) or a cap (False); half-close `dst` at EOF. With `length`,
    copy exactly that many bytes and stop reading (True). Silence for IDLE_TIMEOUT_S
    raises TimeoutError (one timer per pump, moved on each chunk)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(IDLE_TIMEOUT_S) as idle:
        while True:
            if length == 0:
                return True
            data = await src.read(CHUNK_BYTES if length is None else min(CHUNK_BYTES, length))
            idle.reschedule(loop.time() + IDLE_TIMEOUT_S)
            if not data:
                if dst.can_write_eof():
                    with contextlib.suppress(OSError):
                        dst.write_eof()
                return True
            if length is not None:
                length -= len(data)
            n = allow(len(data))
            if n:
                dst.write(data[:n] if n < len(data) else data)
                if dst.transport.get_write_buffer_size() > WRITE_BUFFER_BYTES:
                    await dst.drain()
            if n < len(data):
                return False


async def _connect(verdict: Verdict) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the first checked address that answers (never re-resolved)."""
    last: OSError = OSError("no address")
    for address in verdict.addresses:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(str(address), verdict.port, limit=CHUNK_BYTES),
                CONNECT_TIMEOUT_S,
            )
        except TimeoutError:
            last = OSError(f"no answer from {address} within {CONNECT_TIMEOUT_S:g} s")
        except OSError as exc:
            last = exc
    raise last


def _parse_head(head: bytes) -> tuple[str, str, int, bytes, int | None]:
    """(method, host, port, head to send upstream, request body bytes: None for a
    CONNECT tunnel); `_Refused` for what is not a proxy request we serve."""
    if len(head) > MAX_HEAD_BYTES:
        raise _Refused(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise _Refused(400, "unreadable request head") from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(400, "warden egress: not an HTTP/1.x proxy request")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _authority(target, default_port=None)
        return method, host, port, b"", None
    if not target.lower().startswith("http://"):
        raise _Refused(
            400,
            "warden egress: only CONNECT and absolute http:// requests are proxied "
            "(https goes through CONNECT)",
        )
    url = urlsplit(target)
    host, port = _authority(url.netloc, default_port=80)
    if "@" in url.netloc:
        raise _Refused(400, "warden egress: credentials in the URL are not forwarded")
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    kept = [
        line
        for line in lines[1:]
        if line and line.split(":", 1)[0].strip().lower() not in HOP_HEADERS | {"host"}
    ]
    # The Host header is the URL's: the one that was decided on, not another
    # virtual host behind the same address.
    out = [f"{method} {path} {version}", f"Host: {url.netloc}", *kept, "Connection: close", "", ""]
    return method, host, port, "\r\n".join(out).encode("latin-1"), _body_bytes(lines[1:])


def _body_bytes(header_lines: list[str]) -> int:
    """How many body bytes follow a plain HTTP request head: its one Content-Length
    (0 without one). Chunked bodies and conflicting lengths are refused, so the
    proxy always knows where the one request it decided on ends."""
    lengths: set[str] = set()
    for line in header_lines:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "transfer-encoding":
            raise _Refused(
                411, "warden egress: chunked request bodies are not proxied over plain http "
                "(send a Content-Length, or use https)",
            )  # fmt: skip
        if name == "content-length":
            lengths.update(v.strip() for v in value.split(","))
    if not lengths:
        return 0
    if len(lengths) > 1 or not all(v.isdigit() and len(v) <= 15 for v in lengths):
        raise _Refused(400, "warden egress: conflicting or invalid Content-Length")
    return int(lengths.pop())


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise _Refused(400, f"warden egress: {text[:100]!r} is not host:port")
        host, port_text = text[: end + 1], text[end + 1 :].removeprefix(":")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not port_text:
        if default_port is None:
            raise _Refused(400, f"warden egress: CONNECT {text[:100]!r} needs host:port")
        return host, default_port
    if not port_text.isdigit() or len(port_text) > 5:
        raise _Refused(400, f"warden egress: {text[:100]!r} has no valid port")
    return host, int(port_text)


def _peer_uid(sock: socket.socket) -> int | None:
    return peer_uid(sock)
