"""What the host knows of its model calls, without the model SDK: each HTTP attempt
(`Attempt`), what a call answered the sandbox (`UpstreamAnswer`), a subagent's failed
calls (`UpstreamFailures`), the text of a streamed answer as progress (`TextProgress`),
and why retries stopped early (`STOP_HEADER`, `spend_limited`).

Kept apart from `upstream`, `streaming` and `retry`, which are built on the anthropic
SDK, so that starting a run (the broker, the manager, the first sandboxes) never waits
for that SDK's import (`client.PendingClient` does it in the background).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from orchestrator.jsontypes import JSONValue

STOP_HEADER = "x-warden-retry-stopped"
"""Response header saying why retries stopped early (read back for the error message)."""
NOT_RETRYABLE_PHRASES = ("spend limit", "usage limit", "credit balance", "billing")
"""Words in an error message that mean waiting will not help."""
SPEND_SCAN_BYTES = 4096
"""How much of an error body is searched for spend-limit words."""


def spend_limited(status: int, body: bytes) -> bool:
    """Whether an error answer reports a spend limit or billing problem."""
    if status == 402:
        return True
    text = body[:SPEND_SCAN_BYTES].decode("utf-8", "replace").lower()
    return "billing_error" in text or any(phrase in text for phrase in NOT_RETRYABLE_PHRASES)


PROGRESS_INTERVAL_S = 0.5
"""Least time between two progress events of one model call."""
MAX_PROGRESS_CHARS = 2_000
"""Most text one progress event carries (the newest part; the rest is announced)."""

TextSink = Callable[[str], Awaitable[None]]
"""Receives a stretch of the model's text as it streams (a progress event)."""


class TextProgress:
    """Collects text deltas and passes them to `sink`, throttled."""

    def __init__(
        self,
        sink: TextSink,
        interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.interval_s = interval_s
        self.clock = clock
        self._buffer: list[str] = []
        self._size = 0
        self._last = clock()

    async def add(self, text: str) -> None:
        self._buffer.append(text)
        self._size += len(text)
        if self.clock() - self._last >= self.interval_s:
            await self.flush()

    async def flush(self) -> None:
        if not self._buffer:
            return
        text = "".join(self._buffer)
        self._buffer, self._size, self._last = [], 0, self.clock()
        if len(text) > MAX_PROGRESS_CHARS:
            cut = len(text) - MAX_PROGRESS_CHARS + 40
            text = f"[... {cut} characters not shown] " + text[cut:]
        await self.sink(text)


@dataclass
class Attempt:
    """One HTTP attempt of a model call, as the host saw it."""

    number: int
    """1 for the first attempt, 2 for the first retry, ..."""
    started: float
    """Unix time the attempt was sent."""
    ended: float
    status: int | None
    """HTTP status; None when the endpoint did not answer."""
    payload: JSONValue = None
    """The answer's JSON (error bodies; the final answer of a call), else None."""
    error: str | None = None
    """Why there was no answer (connection error), or None."""
    stopped: str | None = None
    """Why the SDK was told not to retry this answer (`STOP_HEADER`), if it was."""
    incomplete: str | None = None
    """How a streamed answer that began (HTTP 200) broke off, if it did."""


@dataclass
class UpstreamFailures:
    """Failed upstream model calls of one subagent since its last success.

    Recorded on the host, so how a subagent's model call failed is told from what
    the API answered, not from what the sandbox reports."""

    count: int = 0
    """Failed calls (each after the SDK's retries)."""
    attempts: int = 0
    """HTTP attempts those calls made in all."""
    status: int | None = None
    """The last failure's HTTP status; None when the endpoint did not answer."""
    payload: JSONValue = None
    stopped: str | None = None
    """Why retries of the last call stopped early, if they did."""
    incomplete: str | None = None
    """How the last call's streamed answer broke off, when that is how it failed
    (`status` is then None: no error status was answered)."""
    incomplete_kind: str | None = None
    """The error type of the `error` event that broke it, if one did."""

    def observe(
        self,
        status: int | None,
        payload: JSONValue,
        attempts: list[Attempt],
        incomplete: str | None = None,
        stopped: str | None = None,
        incomplete_kind: str | None = None,
    ) -> None:
        if status is not None and status < 400 and incomplete is None:
            self.count, self.attempts, self.status, self.payload = 0, 0, None, None
            self.stopped = self.incomplete = self.incomplete_kind = None
            return
        self.count += 1
        self.attempts += max(1, len(attempts))
        self.status = None if incomplete is not None else status
        self.payload = payload
        self.incomplete, self.incomplete_kind = incomplete, incomplete_kind
        self.stopped = stopped or (attempts[-1].stopped if attempts else None)


@dataclass
class UpstreamAnswer:
    """What the broker returns to the sandbox for one model call."""

    status: int
    payload: JSONValue
    headers: dict[str, str] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)
    incomplete: str | None = None
    """How the streamed answer broke off on the last attempt, when it failed so."""
    incomplete_kind: str | None = None
    """The error type of the `error` event that broke it, if one did."""
    stopped: str | None = None
    """Why no further attempt was made, when that was not the attempt count."""

    @property
    def retries(self) -> int:
        return max(0, len(self.attempts) - 1)


MAX_ATTEMPTS_DESCRIBED = 10
"""Attempts named one by one in a retry notice; more are counted."""


def describe_retries(answer: UpstreamAnswer) -> str:
    """One line on a call the SDK retried: each attempt's outcome and how it ended."""
    outcomes = [_outcome(a) for a in answer.attempts[:MAX_ATTEMPTS_DESCRIBED]]
    if len(answer.attempts) > MAX_ATTEMPTS_DESCRIBED:
        outcomes.append(f"... {len(answer.attempts) - MAX_ATTEMPTS_DESCRIBED} more")
    took = answer.attempts[-1].ended - answer.attempts[0].started if answer.attempts else 0.0
    ended = "succeeded" if answer.status < 400 else f"failed with HTTP {answer.status}"
    line = (
        f"model call retried {answer.retries} time(s) on the host in {took:.1f} s "
        f"({'; '.join(outcomes)}); it {ended}"
    )
    stopped = answer.attempts[-1].stopped if answer.attempts else None
    return line + (f": {stopped}" if stopped else "")


def _outcome(attempt: Attempt) -> str:
    if attempt.incomplete is not None:
        return f"#{attempt.number} incomplete ({attempt.incomplete})"
    if attempt.status is None:
        return f"#{attempt.number} no answer ({attempt.error})"
    kind = None
    if isinstance(attempt.payload, dict):
        error = attempt.payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            kind = str(error["type"])[:40]
    return f"#{attempt.number} HTTP {attempt.status}" + (f" {kind}" if kind else "")
