"""The runner's client for the broker socket: JSON over HTTP/1.1 on a Unix socket.

Written with the standard library's `http.client` (a small subclass that
connects to a Unix socket) because the sandbox carries no third-party
packages: every model call, permission request and checkpoint is one JSON
document each way on a local socket, which needs no HTTP client stack. The
broker on the host owns the model API's retries (the anthropic SDK there); this
client only tells apart "the broker does not answer" (`BrokerUnavailableError`,
the runner cannot go on), "it answered with an error" (`BrokerRequestError`,
with the message of the Anthropic-shaped error body) and "it did not answer
in time" (`BrokerTimeoutError`).

One connection is kept open between requests (the broker closes idle ones
after a few seconds; a request that finds its kept connection closed is sent
once more on a new one, before any answer could have been read). One client is
used by one thread only. Calls that wait for a human (`/v1/permission`) or for
a nested task (`/v1/task`) have no read timeout.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable
from typing import Literal, TypeVar

from sandbox_tools import wire
from sandbox_tools.errors import BrokerRequestError, BrokerTimeoutError, BrokerUnavailableError
from sandbox_tools.jsontypes import JSONObject, JSONValue

BROKER_CONNECT_TIMEOUT_S = 5.0
"""How long connecting to the broker socket may take."""

BROKER_REQUEST_TIMEOUT_S = 60.0
"""Read/write timeout of the quick endpoints (spec, events, transcript, result)."""

MODEL_CALL_TIMEOUT_S = 600.0
"""Timeout of one model call through the broker (the host retries within it)."""

ERROR_TEXT_CHARS = 500
"""How much of a non-JSON error answer is quoted."""

T = TypeVar("T")

QUICK: Literal["quick"] = "quick"
"""`timeout` of `BrokerClient.call` meaning the client's quick-endpoint timeout."""

_STALE_CONNECTION = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""What a kept connection the broker closed while idle fails with."""


class UnixHTTPConnection(http.client.HTTPConnection):
    """`http.client.HTTPConnection` to a Unix socket path instead of a host and port.
    A request goes in one write, head and body together (`http.client` writes them
    separately: the broker would then wake twice, and wait for the body's half)."""

    def __init__(self, socket_path: str, timeout: float | None) -> None:
        super().__init__(wire.BROKER_HOST, timeout=timeout)
        self.socket_path = socket_path
        self._pending: list[bytes] | None = None

    def endheaders(self, message_body: object = None, *, encode_chunked: bool = False) -> None:
        self._pending = []
        try:
            super().endheaders(message_body, encode_chunked=encode_chunked)  # type: ignore[arg-type]
            data = b"".join(self._pending)
        finally:
            self._pending = None
        if data:
            super().send(data)

    def send(self, data: object) -> None:
        if self._pending is not None and isinstance(data, bytes | bytearray):
            self._pending.append(bytes(data))
            return
        if self._pending:  # anything else (a file body) goes after what was gathered
            gathered, self._pending = b"".join(self._pending), []
            super().send(gathered)
        super().send(data)  # type: ignore[arg-type]

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(BROKER_CONNECT_TIMEOUT_S)
            sock.connect(self.socket_path)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class BrokerClient:
    """warden's broker endpoints, as plain JSON documents (see `wire`)."""

    def __init__(
        self, socket_path: str = wire.BROKER_SOCKET, request_timeout_s: float | None = None
    ) -> None:
        self.socket_path = socket_path
        self.quick_timeout_s = (
            BROKER_REQUEST_TIMEOUT_S if request_timeout_s is None else request_timeout_s
        )
        self._conn: UnixHTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, timeout: float | None) -> tuple[UnixHTTPConnection, bool]:
        """(the connection, whether it was used before)."""
        conn = self._conn
        if conn is not None and conn.sock is not None:
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn, True
        if conn is not None:
            conn.close()
        self._conn = UnixHTTPConnection(self.socket_path, timeout)
        return self._conn, False

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float | None,
    ) -> tuple[int, bytes]:
        for attempt in (1, 2):
            conn, reused = self._connection(timeout)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except _STALE_CONNECTION as e:
                self.close()
                if reused and attempt == 1:
                    continue  # closed by the broker while idle: nothing was read yet
                raise self._unavailable(path, e) from e
            except TimeoutError as e:
                self.close()  # half a request may be in flight: never reuse it
                raise BrokerTimeoutError(
                    f"the broker did not answer {path} within {timeout} s"
                ) from e
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise self._unavailable(path, e) from e
            if response.will_close:
                self.close()
            return response.status, data
        raise AssertionError("unreachable")  # pragma: no cover

    def _unavailable(self, path: str, e: BaseException) -> BrokerUnavailableError:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        return BrokerUnavailableError(
            f"cannot reach the broker at {self.socket_path} ({path}): {why}; "
            "the host side of this task is gone or the socket is not mounted"
        )

    def call(
        self,
        path: str,
        body: object = None,
        *,
        timeout: float | Literal["quick"] | None = QUICK,
        headers: dict[str, str] | None = None,
    ) -> JSONValue:
        """One request (GET without a body, POST with one); the parsed JSON answer.
        `timeout` None waits as long as it takes (a human, a nested task).

        Raises:
            BrokerUnavailableError: the socket does not answer.
            BrokerTimeoutError: no answer within `timeout` (the quick one by default).
            BrokerRequestError: an error status, or an answer that is not JSON.
        """
        seconds = self.quick_timeout_s if timeout == QUICK else timeout
        sent = {"Host": wire.BROKER_HOST, **(headers or {})}
        payload = None
        if body is not None:
            # "replace": a lone surrogate (a file name that is not UTF-8, say) becomes
            # "?" instead of making the whole document unsendable.
            payload = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
            sent["Content-Type"] = "application/json"
        status, data = self._exchange(
            "GET" if body is None else "POST", path, payload, sent, seconds
        )
        doc: JSONValue
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if status >= 400:
            message = wire.error_message(doc)
            if message is None:
                message = data[:ERROR_TEXT_CHARS].decode("utf-8", "replace") or f"HTTP {status}"
            raise BrokerRequestError(path, status, message)
        if doc is None:
            raise BrokerRequestError(path, status, "malformed answer: not JSON")
        return doc

    def _decoded(self, path: str, decode: Callable[[object], T], doc: object) -> T:
        try:
            return decode(doc)
        except wire.WireFormatError as e:
            raise BrokerRequestError(path, 200, f"malformed answer: {e}") from e

    def spec(self) -> wire.TaskSpec:
        return self._decoded("/v1/spec", wire.TaskSpec.from_json, self.call("/v1/spec"))

    def permission(self, request: wire.PermissionRequest) -> wire.PermissionResponse:
        doc = self.call("/v1/permission", request, timeout=None)
        return self._decoded("/v1/permission", wire.PermissionResponse.from_json, doc)

    def delegate(self, request: wire.DelegateRequest) -> wire.DelegateResponse:
        doc = self.call("/v1/task", request, timeout=None)
        return self._decoded("/v1/task", wire.DelegateResponse.from_json, doc)

    def events(self, batch: wire.EventBatch) -> None:
        self.call("/v1/events", batch)

    def transcript(self, checkpoint: wire.TranscriptCheckpoint) -> None:
        self.call("/v1/transcript", checkpoint)

    def result(self, request: wire.ResultRequest) -> None:
        self.call("/v1/result", request)

    def messages(self, request: JSONObject) -> JSONObject:
        """One Messages API call through the broker; the response document."""
        doc = self.call(
            "/v1/messages",
            request,
            timeout=MODEL_CALL_TIMEOUT_S,
            headers={"anthropic-version": wire.ANTHROPIC_VERSION},
        )
        if not isinstance(doc, dict):
            raise BrokerRequestError("/v1/messages", 200, "malformed answer: not an object")
        return doc
