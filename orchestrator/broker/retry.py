"""How model calls are retried: the anthropic SDK's own retry layer, bounded in time.

The SDK retries 408/409/429/5xx (529 included) and connection errors with
exponential backoff and honours `retry-after`; `max_retries` caps the attempts,
but nothing caps the total time spent, and a spend limit reported as 429 would
be retried like a rate limit. `RetryBudget` is SDK middleware that adds both:
once a call has spent its budget (or a `retry-after` would overrun it), or when
the answer names a spend limit or billing problem, it marks the response
`x-should-retry: false`, the SDK's own switch; a connection error past the
budget ends the call as `RetryBudgetSpent`. So there is exactly one retry loop
(the SDK's, on the host) and the SDK decides everything else.

Used by the one model client of an orchestrator: the parent's calls and every
broker's upstream calls.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic import Middleware

from orchestrator.broker.model_calls import STOP_HEADER, spend_limited
from sandbox_tools import wire

if TYPE_CHECKING:
    import httpx2
    from anthropic import APIResponse, AsyncAPIResponse
    from anthropic._middleware import AsyncCallNext, CallNext
    from anthropic._request import APIRequest

DEFAULT_MAX_RETRIES = wire.DEFAULT_MODEL_MAX_RETRIES
"""Retries of one model call on 429/5xx/529 and connection errors (9 attempts in all;
the same default as the settings')."""
DEFAULT_RETRY_TOTAL_S = wire.DEFAULT_MODEL_RETRY_TOTAL_S
"""Longest one model call keeps retrying, counted from its first attempt."""
MAX_TRACKED_CALLS = 1024
"""Calls whose first attempt time is remembered (oldest forgotten first)."""
STREAM_RETRY_FIRST_S = 0.5
"""Wait before asking again after the first broken stream (the SDK's first back-off)."""
STREAM_RETRY_MAX_S = 8.0
"""Longest wait between two attempts after a broken stream (the SDK's cap)."""

_CALL_STARTED: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "warden_call_started", default=None
)
"""When the call whose attempts run in this context began (`one_call`)."""


@contextmanager
def one_call() -> Iterator[float]:
    """Every SDK request made in this context is an attempt of one call: its retry
    budget counts from the first (a stream asked again after it broke, `streaming`).
    Yields the call's start (`time.monotonic`)."""
    started = time.monotonic()
    token = _CALL_STARTED.set(started)
    try:
        yield started
    finally:
        _CALL_STARTED.reset(token)


def stream_retry_delay(attempts_made: int) -> float:
    """The jittered exponential wait before the next attempt after a broken stream."""
    base = min(STREAM_RETRY_FIRST_S * 2.0 ** max(0, attempts_made - 1), STREAM_RETRY_MAX_S)
    return base * (1 - 0.25 * random.random())


def budget_of(client: anthropic.AsyncAnthropic) -> RetryBudget | None:
    """The client's `RetryBudget` middleware, if it has one."""
    return next((m for m in client.middleware if isinstance(m, RetryBudget)), None)


def _retry_after_s(headers: httpx2.Headers) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers[name]) / scale
        except (KeyError, ValueError):
            continue
    return None


class RetryBudgetSpent(anthropic.APIError):
    """The endpoint did not answer, and the call's retry budget is spent: not retried.

    An `APIError` (so callers handle it with the SDK's other errors) that is neither
    a status nor a connection error, which the SDK would retry."""

    def __init__(self, cause: anthropic.APIConnectionError, reason: str) -> None:
        super().__init__(f"{cause.message} ({reason})", cause.request, body=None)
        self.cause = cause
        self.reason = reason


class RetryBudget(Middleware):
    """Stops the SDK's retries of one call after `total_s`, and on spend limits."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self._clock = clock
        self._first: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def _begin(self, request: APIRequest) -> None:
        """Remember when the call's first attempt started (before it is sent)."""
        key = self._key(request)
        call_started = _CALL_STARTED.get()
        with self._lock:
            if request.retries_taken == 0 or key not in self._first:
                self._first[key] = self._clock() if call_started is None else call_started
                while len(self._first) > MAX_TRACKED_CALLS:
                    self._first.popitem(last=False)

    def _elapsed(self, request: APIRequest) -> float:
        with self._lock:
            first = self._first.get(self._key(request))
        return 0.0 if first is None else self._clock() - first

    def spent_after(self, started: float, wait_s: float) -> bool:
        """Whether a call begun at `started` (`one_call`) is past its budget once it
        has waited `wait_s` more."""
        return time.monotonic() - started + wait_s > self.total_s

    @staticmethod
    def _key(request: APIRequest) -> str:
        return request.options.idempotency_key or str(id(request.options))

    def judge(self, request: APIRequest, response: httpx2.Response) -> None:
        """Mark `response` not retryable when retrying cannot help or the budget is spent."""
        elapsed = self._elapsed(request)
        if response.status_code < 400:
            return
        reason = None
        retry_after = _retry_after_s(response.headers)
        if spend_limited(response.status_code, response.content):
            reason = "a spend limit or billing problem is not retried"
        elif elapsed >= self.total_s:
            reason = f"the retry budget of {self.total_s:g} s is spent"
        elif retry_after is not None and elapsed + retry_after > self.total_s:
            reason = (
                f"the server asked to wait {retry_after:g} s, past the retry budget of "
                f"{self.total_s:g} s"
            )
        if reason is not None:
            response.headers["x-should-retry"] = "false"
            response.headers[STOP_HEADER] = reason

    def _unanswered(self, request: APIRequest, exc: anthropic.APIConnectionError) -> None:
        """A connection error past the budget ends the call (raises RetryBudgetSpent)."""
        if self._elapsed(request) >= self.total_s:
            raise RetryBudgetSpent(
                exc, f"the retry budget of {self.total_s:g} s is spent"
            ) from None

    def handle(
        self, request: APIRequest, call_next: CallNext
    ) -> APIResponse[Any]:  # Any: the SDK's Middleware.handle signature
        self._begin(request)
        try:
            response = call_next(request)
        except anthropic.APIConnectionError as exc:
            self._unanswered(request, exc)
            raise
        if response.status_code >= 400:
            response.http_response.read()
        self.judge(request, response.http_response)
        return response

    async def handle_async(
        self, request: APIRequest, call_next: AsyncCallNext
    ) -> AsyncAPIResponse[Any]:  # Any: the SDK's Middleware.handle_async signature
        self._begin(request)
        try:
            response = await call_next(request)
        except anthropic.APIConnectionError as exc:
            self._unanswered(request, exc)
            raise
        if response.status_code >= 400:
            await response.http_response.aread()
        self.judge(request, response.http_response)
        return response
