"""Model API errors as one line that names the cause and what to do.

The parent's SDK errors become a `ModelError`; a subagent's failed model call is
described from what its broker saw upstream (on the host, so a sandbox cannot
word it). Both use `describe`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from orchestrator.broker.model_calls import STOP_HEADER, spend_limited
from orchestrator.errors import WardenError

if TYPE_CHECKING:
    import anthropic

    from orchestrator.broker.model_calls import UpstreamFailures

MAX_UPSTREAM_MESSAGE_CHARS = 300
"""How much of the API's own error message is quoted."""

RETRY_SETTINGS = "WARDEN_MODEL_MAX_RETRIES / WARDEN_MODEL_RETRY_TOTAL_S"

_ADVICE = {
    400: "the request was invalid; this is a bug in warden or in the model script: report it "
    "with the run's events file",
    401: "the API key was rejected: check ANTHROPIC_API_KEY",
    403: "the API key may not use this model or feature: use another --model or key",
    404: "the model or endpoint does not exist: check --model and ANTHROPIC_BASE_URL",
    413: "the request is too large: start a new session with a shorter prompt",
}


class ModelError(WardenError, RuntimeError):
    """A model API call failed for good (after any retries); the message says why."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def describe(
    status: int | None,
    kind: str | None,
    message: str,
    *,
    attempts: int = 1,
    stopped: str | None = None,
    body: bytes = b"",
    incomplete: str | None = None,
) -> str:
    """One line: what the model API answered, and what the user should do."""
    quoted = " ".join(message.split())[:MAX_UPSTREAM_MESSAGE_CHARS]
    if incomplete is not None:
        return _describe_incomplete(incomplete, kind, attempts, stopped)
    if status is None:
        return (
            f"the model endpoint did not answer ({quoted}) after {attempts} attempt(s): check "
            "ANTHROPIC_BASE_URL and the network, then run again"
        )
    what = f"the model API answered HTTP {status}" + (f" {kind}" if kind else "")
    what += f": {quoted}" if quoted else ""
    tried = f" after {attempts} attempts" if attempts > 1 else " (not retried)"
    if spend_limited(status, body or message.encode()):
        stopped = None  # the advice says it all
        advice = (
            "a spend limit or billing problem: add credits or raise the limit in the "
            "Anthropic console, then run again"
        )
    elif status in _ADVICE:
        advice = _ADVICE[status]
    elif status == 429 or status >= 500:
        busy = "rate limited" if status == 429 else "overloaded or failing"
        advice = f"the API is {busy}: try again later, or allow more retries ({RETRY_SETTINGS})"
    else:
        advice = "see the API's message"
    note = f"; {stopped}" if stopped else ""
    return f"{what}{tried}{note}. {advice[0].upper()}{advice[1:]}."


def _describe_incomplete(what: str, kind: str | None, attempts: int, stopped: str | None) -> str:
    """A streamed answer that began and broke off (no error status was answered)."""
    tried = f" after {attempts} attempts" if attempts > 1 else " (not retried)"
    note = f"; {stopped}" if stopped else ""
    if kind == "overloaded_error":
        advice = f"The API is overloaded: try again later, or allow more retries ({RETRY_SETTINGS})"
    elif kind is not None:
        advice = (
            f"The API failed mid-answer: try again later, or allow more retries ({RETRY_SETTINGS})"
        )
    else:
        advice = (
            "The API, or a proxy on the way to ANTHROPIC_BASE_URL, ended the stream early: "
            f"check that proxy's timeouts, try again, or allow more retries ({RETRY_SETTINGS})"
        )
    quoted = " ".join(what.split())[:MAX_UPSTREAM_MESSAGE_CHARS]
    return f"the model API's streamed answer was incomplete ({quoted}){tried}{note}. {advice}."


def from_sdk_error(exc: anthropic.APIError, *, max_retries: int = 0) -> ModelError:
    """A `ModelError` for an anthropic SDK `APIError` (status or connection error);
    a connection error is raised after `max_retries` retries."""
    import anthropic

    response = getattr(exc, "response", None)
    attempts = max_retries + 1
    if response is not None:
        try:
            attempts = int(response.request.headers.get("x-stainless-retry-count", "0")) + 1
        except (ValueError, RuntimeError):
            attempts = 1
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error")
        error = error if isinstance(error, dict) else {}
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        message = error.get("message")
        message = message if isinstance(message, str) else exc.message
        text = describe(
            exc.status_code,
            kind,
            message,
            attempts=attempts,
            stopped=exc.response.headers.get(STOP_HEADER),
            body=exc.response.content,
        )
        return ModelError(text, status=exc.status_code)
    return ModelError(describe(None, None, str(exc) or type(exc).__name__, attempts=attempts))


def from_upstream(failures: UpstreamFailures | None) -> str | None:
    """The line for a subagent whose last model calls failed, from what its broker
    saw upstream (attempts and statuses on the host); None when the last call succeeded."""
    if failures is None or failures.count == 0:
        return None
    payload = failures.payload if isinstance(failures.payload, dict) else {}
    error = payload.get("error")
    error = error if isinstance(error, dict) else {}
    kind, message = error.get("type"), error.get("message")
    if failures.incomplete is not None:
        return describe(
            None,
            failures.incomplete_kind,
            "",
            attempts=failures.attempts,
            stopped=failures.stopped,
            incomplete=failures.incomplete,
        )
    if failures.status is None:
        return describe(None, None, _error_text(failures.payload), attempts=failures.attempts)
    return describe(
        failures.status,
        kind if isinstance(kind, str) else None,
        message if isinstance(message, str) else "",
        attempts=failures.attempts,
        stopped=failures.stopped,
        body=json.dumps(payload)[:4096].encode(),
    )


def _error_text(payload: object) -> str:
    """The message of an Anthropic error body (the broker's own, for no answer)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else str(payload)
