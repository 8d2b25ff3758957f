"""The TLS check of a CONNECT tunnel, before its bytes go to the kernel relay.

Every tunnel carries TLS whose ClientHello names the host the tunnel was allowed
for, on every port (a rule `tcp://HOST:PORT` is the one way to open a raw TCP
tunnel, see `rules`). The check covers every ClientHello the client can send in
the clear: the first, and after a HelloRetryRequest the second (RFC 8446 §4.1.4;
change_cipher_spec and early-data records may come between, and are relayed).
The server's first handshake message must be a ServerHello; a second
HelloRetryRequest is refused (the RFC forbids it). After the ServerHello the rest
of the handshake is encrypted and nothing more can be read, so the relay takes
over with whatever each side has already sent (`Checked`).

Reads go through `BufferedSocket`: the proxy owns its bytes, so what was read past
a record (or past a request head) is handed on, never lost or re-read.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orchestrator.egress.sni import (
    CONTENT_ALERT,
    CONTENT_APPLICATION_DATA,
    CONTENT_CHANGE_CIPHER_SPEC,
    CONTENT_HANDSHAKE,
    MAX_RECORD_BYTES,
    MAX_SERVER_RECORD_BYTES,
    RECORD_HEADER_BYTES,
    ClientHelloError,
    is_hello_retry,
    parse_client_hello,
    record_length,
)

HELLO_TIMEOUT_S = 30.0
"""Each handshake record the check waits for must arrive within this."""
MAX_RECORDS_BEFORE_RETRY_HELLO = 16
"""change_cipher_spec / early-data records accepted between a HelloRetryRequest and
the second ClientHello."""
RECV_BYTES = 64 * 1024

Forward = Callable[[bytes], Awaitable[None]]
"""Sends checked bytes on, one way (metered by the proxy; raises TunnelEnded at a cap)."""


class TunnelRefused(Exception):
    """The tunnel's TLS does not name the allowed host; the message says why."""


class TunnelEnded(Exception):
    """The server ended the handshake (an alert, or it closed): nothing to relay."""


class BufferedSocket:
    """A non-blocking socket read through the event loop, with its read-ahead kept."""

    def __init__(self, sock: socket.socket, data: bytes = b"") -> None:
        self.sock = sock
        self.buffer = bytearray(data)

    async def fill(self, n: int) -> None:
        """At least `n` bytes buffered; ConnectionError when the peer closes first."""
        loop = asyncio.get_running_loop()
        while len(self.buffer) < n:
            chunk = await loop.sock_recv(self.sock, max(RECV_BYTES, n - len(self.buffer)))
            if not chunk:
                raise ConnectionError("the peer closed the connection")
            self.buffer += chunk

    async def take(self, n: int) -> bytes:
        await self.fill(n)
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    async def record(self, limit: int, *, any_type: bool = False) -> bytes:
        """One whole TLS record (header included)."""
        async with asyncio.timeout(HELLO_TIMEOUT_S):
            await self.fill(RECORD_HEADER_BYTES)
            length = record_length(
                bytes(self.buffer[:RECORD_HEADER_BYTES]), limit, any_type=any_type
            )
            return await self.take(RECORD_HEADER_BYTES + length)

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)


@dataclass(frozen=True)
class Checked:
    """A tunnel whose TLS passed: what each side sent past the checked records."""

    from_client: bytes
    from_server: bytes


def check_hello(record: bytes, host: str) -> None:
    """TunnelRefused unless `record` is a ClientHello whose SNI is `host`."""
    try:
        hello = parse_client_hello(record)
    except ClientHelloError as exc:
        raise TunnelRefused(f"the TLS ClientHello is refused: {exc}") from None
    if hello.server_name is None:
        raise TunnelRefused("the TLS ClientHello names no server (SNI); send the host name")
    if hello.server_name != host:
        raise TunnelRefused(
            f"the TLS server name {hello.server_name[:100]!r} differs from the CONNECT host "
            f"{host}; a tunnel reaches only the host it was allowed for"
        )


async def first_hello(client: BufferedSocket, host: str, port: int) -> bytes:
    """The client's first record, checked; TunnelRefused (naming the raw-TCP rule for a
    client that does not speak TLS)."""
    try:
        record = await client.record(MAX_RECORD_BYTES)
    except ClientHelloError as exc:
        raise TunnelRefused(
            f"a tunnel must carry TLS naming {host} ({exc}); for a plain TCP protocol, "
            f"a rule must name it: `--allow-domain tcp://{host}:{port}`"
        ) from None
    check_hello(record, host)
    return record


async def handshake(
    client: BufferedSocket, server: BufferedSocket, host: str, forward_up: Forward,
    forward_down: Forward,
) -> Checked:  # fmt: skip
    """After the first ClientHello went up: the server's ServerHello (relayed), and
    after a HelloRetryRequest the client's second ClientHello (checked, relayed) and
    the server's next ServerHello. TunnelRefused / TunnelEnded otherwise."""
    for retry in (False, True):
        reply = await _server_record(server, forward_down)
        if reply[0] == CONTENT_ALERT:
            await forward_down(reply)
            raise TunnelEnded("the server answered the ClientHello with an alert")
        try:
            hello_retry = is_hello_retry(reply)
        except ClientHelloError as exc:
            raise TunnelEnded(str(exc)) from None
        if hello_retry and retry:
            raise TunnelRefused("a second HelloRetryRequest (RFC 8446 forbids it)")
        await forward_down(reply)
        if not hello_retry:
            return Checked(bytes(client.buffer), bytes(server.buffer))
        await _second_hello(client, host, forward_up)
    raise AssertionError("unreachable")  # pragma: no cover


async def _server_record(server: BufferedSocket, forward_down: Forward) -> bytes:
    """The server's next record that is not change_cipher_spec (those, sent after a
    HelloRetryRequest for middlebox compatibility, are relayed)."""
    for _ in range(MAX_RECORDS_BEFORE_RETRY_HELLO):
        try:
            reply = await server.record(MAX_SERVER_RECORD_BYTES, any_type=True)
        except (ClientHelloError, ConnectionError) as exc:
            raise TunnelEnded(f"the server's TLS answer is unusable ({exc})") from None
        if reply[0] != CONTENT_CHANGE_CIPHER_SPEC:
            return reply
        await forward_down(reply)
    raise TunnelEnded("the server sent no ServerHello")


async def _second_hello(client: BufferedSocket, host: str, forward_up: Forward) -> None:
    for _ in range(MAX_RECORDS_BEFORE_RETRY_HELLO):
        try:
            record = await client.record(MAX_SERVER_RECORD_BYTES, any_type=True)
        except ClientHelloError as exc:
            raise TunnelRefused(
                f"the TLS record after HelloRetryRequest is refused: {exc}"
            ) from None
        if record[0] in (CONTENT_CHANGE_CIPHER_SPEC, CONTENT_APPLICATION_DATA):
            await forward_up(record)
            continue
        if record[0] != CONTENT_HANDSHAKE or len(record) > RECORD_HEADER_BYTES + MAX_RECORD_BYTES:
            raise TunnelRefused("the client did not answer HelloRetryRequest with a ClientHello")
        check_hello(record, host)
        await forward_up(record)
        return
    raise TunnelRefused(
        f"more than {MAX_RECORDS_BEFORE_RETRY_HELLO} records before the second ClientHello"
    )
