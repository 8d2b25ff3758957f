"""Clients for the broker socket: a typed one for warden's endpoints, the SDK for models.

Both speak HTTP over the Unix socket mounted at `wire.BROKER_SOCKET`; the host
name in `wire.BROKER_BASE_URL` is never resolved. Calls that wait for a human
(`/v1/permission`) or for a nested task (`/v1/task`) have no read timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import httpx2
from pydantic import BaseModel, ValidationError

from sandbox_tools import wire
from sandbox_tools.errors import BrokerRequestError, BrokerUnavailableError

if TYPE_CHECKING:
    import anthropic

BROKER_CONNECT_TIMEOUT_S = 5.0
"""How long connecting to the broker socket may take."""

BROKER_REQUEST_TIMEOUT_S = 60.0
"""Read/write timeout of the quick endpoints (spec, events, transcript, result)."""

MODEL_CALL_TIMEOUT_S = 600.0
"""Timeout of one model call through the broker."""



T = TypeVar("T", bound=BaseModel)


def _error_message(response: httpx2.Response) -> str:
    try:
        return wire.ErrorBody.model_validate_json(response.content).error.message
    except ValidationError:
        return response.text[: wire.MAX_EVENT_DETAIL_CHARS] or response.reason_phrase


class BrokerClient:
    """warden's own broker endpoints, with the wire models on both ends."""

    def __init__(
        self, socket_path: str = wire.BROKER_SOCKET, request_timeout_s: float | None = None
    ) -> None:
        self.socket_path = socket_path
        quick_s = BROKER_REQUEST_TIMEOUT_S if request_timeout_s is None else request_timeout_s
        self._quick = httpx2.Timeout(quick_s, connect=BROKER_CONNECT_TIMEOUT_S)
        # Waits for a human (permission) or a whole nested task: no read timeout.
        self._patient = httpx2.Timeout(quick_s, connect=BROKER_CONNECT_TIMEOUT_S, read=None)
        self._http = httpx2.Client(
            transport=httpx2.HTTPTransport(uds=socket_path),
            base_url=wire.BROKER_BASE_URL,
            timeout=self._quick,
        )

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        path: str,
        answer: type[T],
        body: BaseModel | None = None,
        patient: bool = False,
    ) -> T:
        """One request; BrokerUnavailableError if the socket does not answer,
        BrokerRequestError on an error status or a malformed answer."""
        timeout = self._patient if patient else self._quick
        try:
            if body is None:
                response = self._http.get(path, timeout=timeout)
            else:
                response = self._http.post(
                    path,
                    content=body.model_dump_json(),
                    headers={"content-type": "application/json"},
                    timeout=timeout,
                )
        except httpx2.TransportError as e:
            raise BrokerUnavailableError(
                f"cannot reach the broker at {self.socket_path} ({path}): {e or type(e).__name__}; "
                "the host side of this task is gone or the socket is not mounted"
            ) from e
        if response.status_code >= 400:
            raise BrokerRequestError(path, response.status_code, _error_message(response))
        try:
            return answer.model_validate_json(response.content)
        except ValidationError as e:
            raise BrokerRequestError(
                path, response.status_code, f"malformed answer: {e.error_count()} errors"
            ) from e

    def spec(self) -> wire.TaskSpec:
        return self._call("/v1/spec", wire.TaskSpec)

    def permission(self, request: wire.PermissionRequest) -> wire.PermissionResponse:
        return self._call("/v1/permission", wire.PermissionResponse, request, patient=True)

    def delegate(self, request: wire.DelegateRequest) -> wire.DelegateResponse:
        return self._call("/v1/task", wire.DelegateResponse, request, patient=True)

    def event(self, request: wire.EventRequest) -> None:
        self._call("/v1/events", wire.Ack, request)

    def transcript(self, request: wire.TranscriptCheckpoint) -> None:
        self._call("/v1/transcript", wire.Ack, request)

    def result(self, request: wire.ResultRequest) -> None:
        self._call("/v1/result", wire.Ack, request)


def model_client(
    socket_path: str = wire.BROKER_SOCKET,
    max_retries: int = wire.DEFAULT_MODEL_MAX_RETRIES,
    retry_total_s: float = wire.DEFAULT_MODEL_RETRY_TOTAL_S,
) -> anthropic.Anthropic:
    """The real anthropic SDK, talking to the broker's `/v1/messages` over the socket.
    It is the only retry layer of a subagent's model calls (see `model_retry`)."""
    import anthropic  # heavy (most of the runner's start-up); only the loop needs it

    from sandbox_tools.model_retry import RetryBudget

    return anthropic.Anthropic(
        base_url=wire.BROKER_BASE_URL,
        api_key=wire.PLACEHOLDER_API_KEY,
        http_client=httpx2.Client(transport=httpx2.HTTPTransport(uds=socket_path)),
        max_retries=max_retries,
        timeout=MODEL_CALL_TIMEOUT_S,
        middleware=[RetryBudget(retry_total_s)],
    )
