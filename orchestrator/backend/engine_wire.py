"""The wire level of the thin Engine API client: HTTP/1.1 by hand over a Unix socket,
the errors an exchange can end in, and the multiplexed-stream framing.

Hand-rolled because `http.client` costs ~13 ms of imports (the `email` package) on
every `warden exec`, and cannot hand back the raw stream of an attach upgrade anyway.
One connection per request (`Connection: close`), so nothing is shared between threads.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from collections.abc import Callable, Iterator, Mapping

from orchestrator.errors import WardenError

MAX_HEADER_BYTES = 64 * 1024
"""An answer whose status line and headers exceed this is refused as malformed."""
RECV_CHUNK = 64 * 1024
FRAME_HEADER = struct.Struct(">BxxxL")
"""Multiplexed stream frame header: stream id (1 stdout, 2 stderr), 3 pad, length."""

_NO_BODY_STATUSES = frozenset({101, 204, 304})


class EngineAPIError(WardenError, RuntimeError):
    """The engine answered a request with an error status."""

    def __init__(self, message: str, status_code: int | None, explanation: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.explanation = explanation


class NotFound(EngineAPIError, LookupError):
    """404: no such container or image."""


class Conflict(EngineAPIError):
    """409: e.g. the container is not running, or its removal is in progress."""


class ServerError(EngineAPIError):
    """5xx: the engine failed; transient unless its message says otherwise."""


class EngineConnectionError(WardenError, ConnectionError):
    """The engine's socket could not be reached, or the connection broke."""


class EngineReadTimeout(WardenError, TimeoutError):
    """The engine did not answer within the request's timeout."""


def iter_frames(recv: Callable[[int], bytes | None]) -> Iterator[tuple[int, bytes]]:
    """(stream id, payload) frames of a multiplexed stream, until EOF.

    `recv(n)` returns at most n bytes and b"" at EOF (a socket's `recv`, a file's
    `read`). A frame cut short by EOF ends the iteration.
    """
    while True:
        header = _read_exact(recv, FRAME_HEADER.size)
        if len(header) < FRAME_HEADER.size:
            return
        stream, length = FRAME_HEADER.unpack(header)
        payload = _read_exact(recv, length)
        if len(payload) < length:
            return
        yield stream, payload


def _read_exact(recv: Callable[[int], bytes | None], size: int) -> bytes:
    chunks: list[bytes] = []
    missing = size
    while missing > 0:
        chunk = recv(min(missing, RECV_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


class Connection:
    """One HTTP/1.1 exchange on a fresh Unix-socket connection, with a read buffer."""

    def __init__(self, path: str, timeout_s: float | None) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self._buffer = bytearray()
        try:
            self.sock.connect(path)
        except OSError as exc:
            self.sock.close()
            raise EngineConnectionError(f"cannot connect to unix://{path}: {exc}") from exc

    def _fill(self) -> bool:
        chunk = self.sock.recv(RECV_CHUNK)
        self._buffer += chunk
        return bool(chunk)

    def readline(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > MAX_HEADER_BYTES or not self._fill():
                raise EngineConnectionError("the engine closed the connection mid-answer")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def read_exact(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._fill():
                raise EngineConnectionError(
                    f"the engine closed the connection after {len(self._buffer)} of {size} bytes"
                )
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def read_to_eof(self) -> bytes:
        while self._fill():
            pass
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def take_buffered(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def close(self) -> None:
        self.sock.close()


class AttachStream:
    """The raw output stream of an attach upgrade (what `attach_socket` returns)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._pending = connection.take_buffered()

    def recv(self, size: int) -> bytes:
        """At most `size` bytes; b"" at EOF or once closed."""
        if self._pending:
            data, self._pending = self._pending[:size], self._pending[size:]
            return data
        try:
            return self._connection.sock.recv(size)
        except OSError:
            return b""

    def settimeout(self, timeout_s: float | None) -> None:
        self._connection.sock.settimeout(timeout_s)

    def close(self) -> None:
        # shutdown first: it wakes a reader thread blocked in recv, close alone does not.
        with contextlib.suppress(OSError):
            self._connection.sock.shutdown(socket.SHUT_RDWR)
        self._connection.close()


@contextlib.contextmanager
def transport_errors(path: str) -> Iterator[None]:
    """Socket failures during an exchange become EngineReadTimeout / EngineConnectionError."""
    try:
        yield
    except WardenError:
        raise
    except TimeoutError as exc:
        raise EngineReadTimeout(
            f"Read timed out: the engine at unix://{path} did not answer in time"
        ) from exc
    except OSError as exc:
        raise EngineConnectionError(f"lost the connection to unix://{path}: {exc}") from exc


def read_head(connection: Connection) -> tuple[int, dict[str, str]]:
    status_line = connection.readline().decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise EngineConnectionError(f"the engine sent a malformed status line {status_line!r}")
    headers: dict[str, str] = {}
    while line := connection.readline():
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    return int(parts[1]), headers


def read_body(connection: Connection, status: int, headers: Mapping[str, str]) -> bytes:
    if status in _NO_BODY_STATUSES or 100 <= status < 200:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        while True:
            size_text = connection.readline().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as exc:
                raise EngineConnectionError(f"malformed chunk size {size_text!r}") from exc
            if size == 0:
                while connection.readline():  # trailers, then the empty line
                    pass
                return b"".join(chunks)
            chunks.append(connection.read_exact(size))
            connection.readline()
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        return connection.read_exact(int(length))
    return connection.read_to_eof()


def raise_for_status(status: int, payload: bytes, method: str, path: str) -> None:
    if status < 400:
        return
    text = payload.decode("utf-8", "replace").strip()
    try:
        explanation = str(json.loads(text).get("message", text))
    except (ValueError, AttributeError):
        explanation = text
    kind = {404: NotFound, 409: Conflict}.get(status)
    if kind is None:
        kind = ServerError if status >= 500 else EngineAPIError
    raise kind(
        f"{status} from the Docker engine for {method} {path}: {explanation or '(no message)'}",
        status,
        explanation,
    )
