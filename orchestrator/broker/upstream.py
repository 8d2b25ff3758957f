"""The model endpoint: where a checked, budgeted request finally goes, through the
anthropic SDK, with the real API key (which exists only here, on the host).

One `AsyncAnthropic` client per orchestrator (`model_client`) serves the parent
and every broker. The SDK owns the HTTP layer: retries of 429 (honouring
`retry-after`), 5xx, 529 and connection errors, bounded in total time by
`retry.RetryBudget`, which also stops spend limits from being retried; other
4xx are never retried. The request body goes through the SDK's generic `post`
as the JSON the runner sent, after the broker's checks, so no field is dropped or
re-typed on the way, including fields this SDK version does not know. It is sent
with `stream: true` (`streaming` assembles the message and reports the text as it
comes), or plain when `Upstream.stream` is off; either way the answer goes back
as the API's JSON. Every
HTTP attempt of a call is recorded (`Attempt`) by `AttemptLog`, SDK middleware
inside the retry loop, so retries are seen on the host: in the trace
(`Upstream.on_attempt`), in the task's events and in its error line.

Errors reach the sandbox as Anthropic error bodies
(`{"type": "error", "error": {"type", "message"}}`) with the upstream status;
an endpoint that never answered is a 502 (504 on a timeout).
"""

from __future__ import annotations

import contextvars
import logging
import time
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
from anthropic import Middleware

from orchestrator.broker.model_calls import (
    STOP_HEADER,
    Attempt,
    TextProgress,
    UpstreamAnswer,
    UpstreamFailures,
)
from orchestrator.broker.retry import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_TOTAL_S,
    RetryBudget,
    RetryBudgetSpent,
)
from orchestrator.broker.streaming import NotAStreamError, StreamBroken, stream_message
from orchestrator.errors import API_ERROR_TYPES, api_error_type
from orchestrator.jsontypes import JSONValue
from sandbox_tools import wire

if TYPE_CHECKING:
    from anthropic import AsyncAPIResponse
    from anthropic._middleware import AsyncCallNext
    from anthropic._request import APIRequest

    from orchestrator.broker.client import Upstream

log = logging.getLogger(__name__)

MESSAGES_PATH = "/v1/messages"
UPSTREAM_TIMEOUT_S = 600.0
"""Longest a single upstream attempt may take (the SDK's limit for non-streaming calls)."""
CONNECT_TIMEOUT_S = 10.0
"""Longest the TCP/TLS connect of one attempt may take."""
MAX_VERSION_HEADER_CHARS = 40
"""`anthropic-version` from the runner is passed upstream (bounded); `anthropic-beta`
only as policy allows (see `forwarding`); every other header, any key included, is
dropped (the SDK adds the key)."""
PLACEHOLDER_KEY = "unset"
"""Sent when no key is configured (a local scripted server), so the SDK never looks
for credentials of its own in the environment or on disk."""
MAX_ERROR_TEXT_CHARS = 500
"""How much of a non-JSON error body is quoted back to the sandbox."""


_CALL_ATTEMPTS: contextvars.ContextVar[list[Attempt] | None] = contextvars.ContextVar(
    "warden_upstream_attempts", default=None
)
"""The attempts of the model call running in this context (set by `forward_messages`;
the SDK runs its retry loop in the caller's task, so its middleware sees it)."""


class AttemptLog(Middleware):
    """Appends each HTTP attempt of a broker's call to that call's list (others pass)."""

    async def handle_async(
        self, request: APIRequest, call_next: AsyncCallNext
    ) -> AsyncAPIResponse[Any]:  # Any: the SDK's Middleware.handle_async signature
        attempts = _CALL_ATTEMPTS.get()
        if attempts is None:
            return await call_next(request)
        # Numbered across the call: a stream asked again after it broke (`streaming`)
        # is a new SDK request, whose own count starts again.
        number, started = len(attempts) + 1, time.time()
        try:
            response = await call_next(request)
        except anthropic.APIError as exc:
            attempts.append(Attempt(number, started, time.time(), None, error=_why(exc)))
            raise
        http = response.http_response
        payload = _json(http) if http.status_code >= 400 else None
        attempts.append(
            Attempt(
                number,
                started,
                time.time(),
                http.status_code,
                payload,
                stopped=http.headers.get(STOP_HEADER),
            )
        )
        return response


def model_client(
    base_url: str,
    api_key: str | None,
    *,
    max_retries: int = DEFAULT_MAX_RETRIES,
    retry_total_s: float = DEFAULT_RETRY_TOTAL_S,
    http_client: httpx2.AsyncClient | None = None,
) -> anthropic.AsyncAnthropic:
    """The orchestrator's one model client: the SDK's retries bounded by `RetryBudget`,
    each attempt of a broker's call recorded by `AttemptLog`."""
    return anthropic.AsyncAnthropic(
        api_key=api_key or PLACEHOLDER_KEY,
        base_url=base_url,
        max_retries=max_retries,
        timeout=httpx2.Timeout(UPSTREAM_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        http_client=http_client,
        middleware=[AttemptLog(), RetryBudget(retry_total_s)],
        # warden's own spans cover model calls (one per attempt, under the task's
        # span); the SDK's would duplicate them and cost every call its bookkeeping.
        open_telemetry=False,
    )


async def forward_messages(
    upstream: Upstream,
    body: dict[str, JSONValue],
    betas: list[str],
    version: str | None,
    failures: UpstreamFailures | None = None,
    progress: TextProgress | None = None,
) -> UpstreamAnswer:
    """POST one Messages API request upstream through the SDK (which retries),
    streamed when `upstream.stream` (its text deltas go to `progress`). Never raises
    for what the endpoint did: a failed call is an answer in Anthropic's error shape,
    counted in `failures`."""
    headers: dict[str, str] = {}
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    if version:
        headers["anthropic-version"] = version[:MAX_VERSION_HEADER_CHARS]
    attempts: list[Attempt] = []
    token = _CALL_ATTEMPTS.set(attempts)
    try:
        answer = await _post(await upstream.sdk(), body, headers, upstream.stream, progress)
    finally:
        _CALL_ATTEMPTS.reset(token)
    answer.attempts = attempts
    if attempts and answer.status < 400:
        attempts[-1].payload = answer.payload
    if failures is not None:
        last = attempts[-1] if attempts else None
        if answer.incomplete is not None:  # a stream that broke off, for good
            failures.observe(
                None, answer.payload, attempts, incomplete=answer.incomplete,
                stopped=answer.stopped, incomplete_kind=answer.incomplete_kind,
            )  # fmt: skip
        elif last is not None and last.status is None:  # never answered: say why
            failures.observe(None, last.error, attempts)
        else:
            failures.observe(answer.status, answer.payload, attempts)
    if upstream.on_attempt is not None:
        for attempt in attempts:
            upstream.on_attempt(body, attempt)
    return answer


async def _post(
    client: anthropic.AsyncAnthropic,
    body: dict[str, JSONValue],
    headers: dict[str, str],
    stream: bool,
    progress: TextProgress | None,
) -> UpstreamAnswer:
    url = endpoint_url(client)
    try:
        if stream:
            message, response = await stream_message(
                client, MESSAGES_PATH, body, headers, progress, on_broken=_mark_broken
            )
            return UpstreamAnswer(response.status_code, message, _returned(response, failed=False))
        # The SDK's raw-response wrapper: middleware and the retry loop see each
        # attempt's status (a bare `httpx2.Response` cast would bypass both).
        raw = await client.post(
            MESSAGES_PATH,
            cast_to=anthropic.AsyncAPIResponse[object],
            body=body,
            options={"headers": headers},
        )
        response = raw.http_response
        await response.aread()
    except anthropic.APIStatusError as exc:
        # An `error` event inside a stream arrives on a 200: its type names the status.
        status = exc.status_code if exc.status_code >= 400 else _status_of(exc.body)
        return UpstreamAnswer(
            status,
            _error_payload(status, exc.body, exc.response),
            _returned(exc.response, failed=True),
        )
    except NotAStreamError as exc:
        return _not_a_message(url, exc.response)
    except StreamBroken as exc:
        log.warning("model endpoint %s: %s", url, exc.what)
        status = _status_of({"error": {"type": exc.kind}}) if exc.kind else 502
        answer = UpstreamAnswer(
            status,
            wire.error_body(
                exc.kind or "api_error",
                f"the model API's streamed answer was incomplete: {exc.what}",
            ),
            {"x-should-retry": "false"},
        )
        answer.incomplete, answer.stopped = exc.what, exc.stopped
        answer.incomplete_kind = exc.kind
        return answer
    except anthropic.APITimeoutError as exc:
        log.warning("model endpoint %s timed out: %s", url, exc)
        return UpstreamAnswer(
            504,
            wire.error_body("timeout_error", f"the model endpoint did not answer in time: {exc}"),
            {"x-should-retry": "false"},
        )
    except (anthropic.APIConnectionError, RetryBudgetSpent) as exc:
        log.warning("model endpoint %s unreachable: %s", url, _why(exc))
        return UpstreamAnswer(
            502,
            wire.error_body("api_error", f"the model endpoint did not answer: {_why(exc)}"),
            {"x-should-retry": "false"},
        )
    payload = _json(response)
    if not _is_message(payload):
        return _not_a_message(url, response)
    return UpstreamAnswer(response.status_code, payload, _returned(response, failed=False))


def endpoint_url(client: anthropic.AsyncAnthropic) -> str:
    """The Messages endpoint's URL as a person reads it (one slash before `v1`)."""
    return f"{str(client.base_url).rstrip('/')}{MESSAGES_PATH}"


def _mark_broken(broken: StreamBroken) -> None:
    """The call's last attempt began a stream that broke off: say so on its record."""
    attempts = _CALL_ATTEMPTS.get()
    if attempts:
        attempts[-1].incomplete = broken.what


def _status_of(body: object) -> int:
    """The HTTP status of an Anthropic error body's type (500 when unknown)."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return next((s for s, t in API_ERROR_TYPES.items() if t == kind), 500)


def _returned(response: httpx2.Response, *, failed: bool) -> dict[str, str]:
    """Headers passed back to the sandbox: the request id, and on a failure that
    retrying is pointless (the host's SDK has retried already)."""
    request_id = response.headers.get("request-id")
    headers = {"request-id": request_id[:200]} if request_id else {}
    if failed:
        headers["x-should-retry"] = "false"
    return headers


def _error_payload(status: int, body: object, response: httpx2.Response) -> JSONValue:
    """The upstream's Anthropic error body as it is, or one built from what it sent."""
    if isinstance(body, dict):
        error = body.get("error")
        if (
            body.get("type") == "error"
            and isinstance(error, dict)
            and isinstance(error.get("type"), str)
            and isinstance(error.get("message"), str)
        ):
            return _json(response) or wire.error_body(error["type"], error["message"])
    kind = api_error_type(status)
    try:
        text = " ".join(response.text[:MAX_ERROR_TEXT_CHARS].split())
    except httpx2.ResponseNotRead:
        text = ""
    message = f"the model endpoint answered HTTP {status}" + (f": {text}" if text else "")
    return wire.error_body(kind, message)


def _json(response: httpx2.Response) -> JSONValue:
    try:
        value: JSONValue = response.json()
    except (ValueError, httpx2.ResponseNotRead):
        return None
    return value


def _why(exc: BaseException) -> str:
    if isinstance(exc, RetryBudgetSpent):
        return f"{type(exc.cause).__name__}: {exc.message}"
    cause = exc.__cause__
    detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    return f"{type(exc).__name__}{detail}"


def _is_message(payload: JSONValue) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get("content"), list)


def _not_a_message(url: str, response: httpx2.Response) -> UpstreamAnswer:
    """A 200 that is not a Messages API answer (an HTML page, a proxy's login form):
    a 502, which the runner reports as an error."""
    kind = response.headers.get("content-type", "no content type")[:100]
    message = (
        f"the model endpoint {url} answered {response.status_code} with {kind} that is not a "
        "Messages API response; check that ANTHROPIC_BASE_URL points at an "
        "Anthropic-compatible API"
    )
    log.warning("%s", message)
    return UpstreamAnswer(502, wire.error_body("api_error", message), {"x-should-retry": "false"})
