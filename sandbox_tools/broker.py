"""The runner's client for the broker socket: JSON over HTTP/1.1 on a Unix socket.

Standard library only, because the sandbox carries no third-party packages:
every model call, permission request and checkpoint is one JSON document each
way on a local socket, which needs no HTTP client stack (`http1` does the
exchange; `http.client` cost each tool call's permission request 0.15-0.3 ms). The
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

import json
from collections.abc import Callable
from typing import Literal, TypeVar

from sandbox_tools import wire, wire_answers
from sandbox_tools.errors import BrokerRequestError, BrokerTimeoutError, BrokerUnavailableError
from sandbox_tools.http1 import ConnectionClosedError, UnixConnection
from sandbox_tools.jsontypes import JSONObject, JSONValue

BROKER_REQUEST_TIMEOUT_S = 60.0
"""Read/write timeout of the quick endpoints (spec, events, transcript, result)."""

MODEL_CALL_TIMEOUT_S = 600.0
"""Timeout of one model call through the broker (the host retries within it)."""

ERROR_TEXT_CHARS = 500
"""How much of a non-JSON error answer is quoted."""

T = TypeVar("T")

QUICK: Literal["quick"] = "quick"
"""`timeout` of `BrokerClient.call` meaning the client's quick-endpoint timeout."""

_STALE_CONNECTION = (ConnectionClosedError, ConnectionResetError, BrokenPipeError)
"""What a kept connection the broker closed while idle fails with."""


class BrokerClient:
    """warden's broker endpoints, as plain JSON documents (see `wire`)."""

    def __init__(
        self, socket_path: str = wire.BROKER_SOCKET, request_timeout_s: float | None = None
    ) -> None:
        self.socket_path = socket_path
        self.quick_timeout_s = (
            BROKER_REQUEST_TIMEOUT_S if request_timeout_s is None else request_timeout_s
        )
        self._conn = UnixConnection(socket_path, wire.BROKER_HOST)

    def close(self) -> None:
        self._conn.close()

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float | None,
    ) -> tuple[int, bytes]:
        for attempt in (1, 2):
            reused = self._conn.connected
            try:
                response = self._conn.exchange(method, path, body, headers, timeout)
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
            except OSError as e:
                self.close()
                raise self._unavailable(path, e) from e
            if response.will_close:
                self.close()
            return response.status, response.body
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
        sent = dict(headers or {})
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
        except wire_answers.WireFormatError as e:
            raise BrokerRequestError(path, 200, f"malformed answer: {e}") from e

    def spec(self) -> wire_answers.TaskSpec:
        return self._decoded("/v1/spec", wire_answers.TaskSpec.from_json, self.call("/v1/spec"))

    def permission(self, request: wire.PermissionRequest) -> wire_answers.PermissionResponse:
        doc = self.call("/v1/permission", request, timeout=None)
        return self._decoded("/v1/permission", wire_answers.PermissionResponse.from_json, doc)

    def delegate(self, request: wire.DelegateRequest) -> wire_answers.DelegateResponse:
        doc = self.call("/v1/task", request, timeout=None)
        return self._decoded("/v1/task", wire_answers.DelegateResponse.from_json, doc)

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
