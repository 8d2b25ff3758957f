"""One HTTP/1.1 exchange at a time with the broker, on its Unix socket.

The runner's only peer is warden's broker, which answers every request with one
JSON body and a `Content-Length` (aiohttp); the request is one JSON document.
`http.client` would do, and did: but it parses every answer's headers with the
`email` package and builds a buffered reader per answer, about 0.1 ms of CPU
and 0.15-0.3 ms of wall time per request measured on these machines, and every
tool call pays one such request (its permission) on its way. This module writes
the request in one write and reads the answer with plain `recv`: status line,
headers up to `MAX_HEAD_BYTES`, then the body by `Content-Length` (or chunked,
or to the end of the connection, which the broker never sends but HTTP allows).

Errors are those of `http.client` in kind: `ConnectionClosedError` (a
`ConnectionResetError`) when the peer closed before any of the answer arrived, so
the caller may send again on a new connection; `BadResponseError` (an `OSError`)
for an answer that is not HTTP or ends early; the socket's own `TimeoutError`
and `OSError`s as they come.
"""

from __future__ import annotations

import socket
from typing import NamedTuple

MAX_HEAD_BYTES = 64 * 1024
"""Longest status line plus headers read before the answer is called malformed."""

RECV_BYTES = 64 * 1024
"""Bytes asked of the socket per `recv`."""

CONNECT_TIMEOUT_S = 5.0
"""How long connecting to the socket may take."""


class ConnectionClosedError(ConnectionResetError):
    """The peer closed the connection before sending any of its answer."""


class BadResponseError(OSError):
    """What came back is not an HTTP/1.x answer, or it ended early."""


class Response(NamedTuple):
    status: int
    body: bytes
    will_close: bool
    """The peer closes the connection after this answer (or it cannot be reused)."""


class UnixConnection:
    """A kept connection to one Unix socket path; one exchange at a time, one thread."""

    def __init__(self, socket_path: str, host: str) -> None:
        self.socket_path = socket_path
        self.host = host
        self._sock: socket.socket | None = None
        self._buffer = b""

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""

    def exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float | None,
    ) -> Response:
        """Send one request (connecting first if need be) and read its answer."""
        sock = self._sock or self._connect()
        sock.settimeout(timeout)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}"]
        lines += [f"{name}: {value}" for name, value in headers.items() if name != "Host"]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        sock.sendall(head + body if body else head)
        return self._read_response(sock)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self._sock, self._buffer = sock, b""
        return sock

    def _recv(self, sock: socket.socket) -> bytes:
        chunk = sock.recv(RECV_BYTES)
        if not chunk:
            raise BadResponseError("the broker closed the connection in the middle of an answer")
        return chunk

    def _read_response(self, sock: socket.socket) -> Response:
        data = self._buffer
        self._buffer = b""
        while (end := data.find(b"\r\n\r\n")) < 0 and len(data) <= MAX_HEAD_BYTES:
            chunk = sock.recv(RECV_BYTES)
            if not chunk:
                if not data:
                    raise ConnectionClosedError("the broker closed the connection")
                raise BadResponseError("the broker closed the connection in an answer's head")
            data += chunk
        if end < 0 or end > MAX_HEAD_BYTES:
            raise BadResponseError(f"an answer's head is longer than {MAX_HEAD_BYTES} bytes")
        status_line, *header_lines = data[:end].decode("latin-1").split("\r\n")
        rest = data[end + 4 :]
        version, _, tail = status_line.partition(" ")
        code = tail[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise BadResponseError(f"not an HTTP/1.x status line: {status_line[:100]!r}")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if not sep:
                raise BadResponseError(f"not a header line: {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        will_close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body, rest = self._read_chunked(sock, rest)
        elif (length := headers.get("content-length")) is not None:
            if not length.isdigit():
                raise BadResponseError(f"not a Content-Length: {length[:40]!r}")
            body, rest = self._read_exactly(sock, rest, int(length))
        else:  # the body runs to the end of the connection
            parts = [rest]
            while chunk := sock.recv(RECV_BYTES):
                parts.append(chunk)
            body, rest, will_close = b"".join(parts), b"", True
        if rest:  # nothing should follow an answer: do not trust this connection again
            will_close = True
        return Response(int(code), body, will_close)

    def _read_exactly(self, sock: socket.socket, data: bytes, size: int) -> tuple[bytes, bytes]:
        parts, have = [data], len(data)
        while have < size:
            chunk = self._recv(sock)
            parts.append(chunk)
            have += len(chunk)
        whole = b"".join(parts)
        return whole[:size], whole[size:]

    def _read_chunked(self, sock: socket.socket, data: bytes) -> tuple[bytes, bytes]:
        body: list[bytes] = []
        while True:
            while (end := data.find(b"\r\n")) < 0:
                data += self._recv(sock)
            size_text = data[:end].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadResponseError(f"not a chunk size: {size_text[:40]!r}") from None
            chunk, data = self._read_exactly(sock, data[end + 2 :], size + 2)
            if size == 0:  # the last chunk (trailers are not used by the broker)
                return b"".join(body), data
            body.append(chunk[:size])
