"""The server name (SNI) of a TLS ClientHello, read without decrypting anything.

The proxy does not intercept TLS; it only checks that the name a client asks the
server for is the host it was allowed to CONNECT to, so a tunnel to an allowed
host's address cannot open a TLS session for another name served there. The HTTP
`Host` inside the tunnel is encrypted and not checked: a server that routes by it
(domain fronting on a CDN) is a documented limit (docs/egress.md).

Own parser (the standard library's `ssl` cannot parse a ClientHello it did not
make, and a TLS library would be a dependency for 80 lines): every length is
checked against what is left, and anything unusual is refused rather than
guessed at. The whole ClientHello must sit in the first TLS record (every
mainstream client sends it that way; a record is at most `MAX_RECORD_BYTES`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

RECORD_HEADER_BYTES = 5
MAX_RECORD_BYTES = 16384 + 256
"""Largest TLS plaintext record body accepted (RFC 8446 §5.1 allows 2^14, +256 slack)."""
MAX_SERVER_RECORD_BYTES = 16384 + 2048
"""Largest record body accepted from a server (RFC 8446 §5.2: 2^14 + 2048)."""
CONTENT_CHANGE_CIPHER_SPEC = 0x14
CONTENT_ALERT = 0x15
CONTENT_HANDSHAKE = 0x16
CONTENT_APPLICATION_DATA = 0x17
HANDSHAKE_CLIENT_HELLO = 0x01
HANDSHAKE_SERVER_HELLO = 0x02
HELLO_RETRY_RANDOM = bytes.fromhex(
    "CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C"
)
"""The ServerHello.random that makes it a HelloRetryRequest (RFC 8446 §4.1.3): the
client answers with a second ClientHello, which is checked like the first."""
EXT_SERVER_NAME = 0x0000
NAME_TYPE_HOST = 0x00


class ClientHelloError(ValueError):
    """The bytes are not a well-formed ClientHello we accept; the message says why."""


@dataclass(frozen=True)
class ClientHello:
    server_name: str | None
    """The SNI host name (lower case), None when the client sent none."""


def record_length(header: bytes, limit: int = MAX_RECORD_BYTES, *, any_type: bool = False) -> int:
    """Body length of a TLS record from its 5-byte header; ClientHelloError when the
    header is not a record (a handshake record unless `any_type`) of at most `limit`."""
    if len(header) < RECORD_HEADER_BYTES:
        raise ClientHelloError("truncated TLS record header")
    if not any_type and header[0] != CONTENT_HANDSHAKE:
        raise ClientHelloError("not a TLS handshake")
    if header[0] not in (
        CONTENT_CHANGE_CIPHER_SPEC, CONTENT_ALERT, CONTENT_HANDSHAKE, CONTENT_APPLICATION_DATA
    ):  # fmt: skip
        raise ClientHelloError("not a TLS record")
    if header[1] != 0x03:
        raise ClientHelloError("unknown TLS record version")
    length = int.from_bytes(header[3:5], "big")
    if length == 0 or length > limit:
        raise ClientHelloError(f"TLS record of {length} bytes")
    return length


def is_hello_retry(record: bytes) -> bool:
    """Whether a server's first handshake record starts with a HelloRetryRequest
    (True) or a ServerHello (False); ClientHelloError for anything else."""
    body = record[RECORD_HEADER_BYTES:]
    if record[:1] != bytes([CONTENT_HANDSHAKE]) or len(body) < 38:
        raise ClientHelloError("the server did not answer with a ServerHello")
    if body[0] != HANDSHAKE_SERVER_HELLO:
        raise ClientHelloError("the server's first handshake message is not a ServerHello")
    return body[6:38] == HELLO_RETRY_RANDOM


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ClientHelloError(f"truncated ClientHello ({what})")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u16(self, what: str) -> int:
        return int(struct.unpack(">H", self.take(2, what))[0])

    def u24(self, what: str) -> int:
        return int.from_bytes(self.take(3, what), "big")

    def vector(self, length_bytes: int, what: str) -> _Reader:
        n = self.u8(what) if length_bytes == 1 else self.u16(what)
        return _Reader(self.take(n, what))

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


def parse_client_hello(record: bytes) -> ClientHello:
    """The ClientHello in one TLS record (header included). ClientHelloError for
    anything truncated, oversized, split, or carrying more than one server name."""
    length = record_length(record[:RECORD_HEADER_BYTES])
    body = record[RECORD_HEADER_BYTES:]
    if len(body) != length:
        raise ClientHelloError("truncated TLS record" if len(body) < length else "trailing bytes")
    r = _Reader(body)
    if r.u8("handshake type") != HANDSHAKE_CLIENT_HELLO:
        raise ClientHelloError("the first handshake message is not a ClientHello")
    hello_length = r.u24("handshake length")
    if hello_length != r.left:
        raise ClientHelloError("ClientHello not contained in exactly one TLS record")
    r.take(2, "version")
    r.take(32, "random")
    r.vector(1, "session id")
    suites = r.vector(2, "cipher suites")
    if suites.left == 0 or suites.left % 2:
        raise ClientHelloError("malformed cipher suites")
    r.vector(1, "compression methods")
    if r.left == 0:
        return ClientHello(server_name=None)  # no extensions at all
    extensions = r.vector(2, "extensions")
    if r.left:
        raise ClientHelloError("bytes after the extensions")
    name: str | None = None
    seen: set[int] = set()
    while extensions.left:
        kind = extensions.u16("extension type")
        data = extensions.vector(2, "extension data")
        if kind in seen:
            raise ClientHelloError(f"extension {kind} appears twice")
        seen.add(kind)
        if kind == EXT_SERVER_NAME:
            name = _server_name(data)
    return ClientHello(server_name=name)


def _server_name(data: _Reader) -> str:
    names = data.vector(2, "server name list")
    if data.left:
        raise ClientHelloError("bytes after the server name list")
    found: list[str] = []
    while names.left:
        kind = names.u8("name type")
        value = names.vector(2, "host name").data
        if kind != NAME_TYPE_HOST:
            raise ClientHelloError(f"unknown server name type {kind}")
        found.append(value.decode("ascii", "replace"))
    if len(found) != 1:
        raise ClientHelloError(f"{len(found)} server names; exactly one is accepted")
    host = found[0]
    if not host or not host.isascii() or not host.isprintable():
        raise ClientHelloError("the server name is not a printable ASCII host name")
    return host.lower().removesuffix(".")
