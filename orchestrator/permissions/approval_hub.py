"""Several approvers at once: every question is offered to every live channel (the
terminal, the run's web page, a webhook, ...); the first answer wins, the other
channels are told who answered (`withdraw`) and their offers are cancelled.

A channel is any `Approver`. It may also have

- `name`: how failures and the hub's notes name it (else its class name);
- `withdraw(question_id, answer)`: the question was answered elsewhere (the answer's
  `channel`/`person`/`decided_by` say where and by whom); may return an awaitable,
  which runs in the background so the winning answer is never delayed.

A channel whose `approve` raises drops out of that question; when every channel
has dropped out, the question is denied with their reasons. A hub with no
channel at all denies as `NonInteractiveApprover` does (nobody can answer).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    Approver,
    NonInteractiveApprover,
)

log = logging.getLogger(__name__)

WITHDRAW_TIMEOUT_S = 10.0
"""Longest a channel's asynchronous `withdraw` may take before it is abandoned."""
MAX_FAILURE_CHARS = 300
"""Longest account of one channel's failure in a deny reason."""


def channel_name(channel: Approver) -> str:
    """How a channel is named in notes and reasons."""
    name = getattr(channel, "name", None)
    return name if isinstance(name, str) and name else type(channel).__name__


@dataclass
class _Pending:
    """One question on offer: one task per channel, and the first answer."""

    question: ApprovalQuestion
    answered: asyncio.Future[ApprovalAnswer]
    offers: dict[asyncio.Task[ApprovalAnswer], Approver] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


class ApproverHub:
    """An `Approver` that asks every live channel; the first answer wins."""

    def __init__(
        self,
        channels: Iterable[Approver] = (),
        *,
        timeout_s: float | None = None,
        when_none: Approver | None = None,
    ) -> None:
        self._channels: list[Approver] = list(channels)
        self._timeout_s = timeout_s
        """No answer on any channel within this is a deny (`warden run --approval-timeout`)."""
        self._pending: dict[str, _Pending] = {}
        self._when_none = when_none or NonInteractiveApprover()
        self._background: set[asyncio.Task[None]] = set()
        self._closed: str | None = None

    @property
    def channels(self) -> tuple[Approver, ...]:
        return tuple(self._channels)

    @property
    def pending(self) -> tuple[ApprovalQuestion, ...]:
        """The questions waiting for an answer, oldest first."""
        return tuple(p.question for p in self._pending.values())

    def add_channel(self, channel: Approver) -> Callable[[], None]:
        """Offer every question from now on (and those waiting now) to `channel`.
        Returns a function that removes it again (its open offers are cancelled)."""
        self._channels.append(channel)
        for pending in list(self._pending.values()):
            self._offer(pending, channel)

        def remove() -> None:
            if channel in self._channels:
                self._channels.remove(channel)
            for pending in list(self._pending.values()):
                for task, offered_to in list(pending.offers.items()):
                    if offered_to is channel:
                        task.cancel()

        return remove

    def close(self, reason: str = "the run is stopping") -> None:
        """Deny every waiting question (and any asked later) with `reason`; each
        channel is told. A stopping run calls this first, so no call waits on a person."""
        self._closed = reason
        for pending in list(self._pending.values()):
            if not pending.answered.done():
                pending.answered.set_result(self._stopped())

    def _stopped(self) -> ApprovalAnswer:
        return ApprovalAnswer(
            behavior="deny", reason=f"{self._closed}, so it is denied", channel="stopped"
        )

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        if self._closed is not None:
            return self._stopped()
        if not self._channels:
            return await self._when_none.approve(q)
        if q.question_id in self._pending:
            raise ValueError(f"question {q.question_id} is already waiting for an answer")
        pending = _Pending(q, asyncio.get_running_loop().create_future())
        self._pending[q.question_id] = pending
        try:
            for channel in list(self._channels):
                self._offer(pending, channel)
            if self._timeout_s is None:
                answer = await pending.answered
            else:
                # asyncio.wait, not wait_for: the timeout becomes the winning answer, so
                # every channel is told (withdraw) rather than just cut off.
                await asyncio.wait({pending.answered}, timeout=self._timeout_s)
                if not pending.answered.done():
                    pending.answered.set_result(
                        ApprovalAnswer(
                            behavior="deny",
                            reason=f"no approval within {self._timeout_s:g}s, so it is denied",
                            channel="timeout",
                        )
                    )
                answer = pending.answered.result()
        finally:
            del self._pending[q.question_id]
            winner = pending.answered.result() if _has_result(pending.answered) else None
            for task, channel in pending.offers.items():
                if task.done():
                    continue
                if winner is not None:
                    self._withdraw(channel, q.question_id, winner)
                task.cancel()
        return answer

    def _offer(self, pending: _Pending, channel: Approver) -> None:
        task = asyncio.ensure_future(channel.approve(pending.question))
        pending.offers[task] = channel
        task.add_done_callback(functools.partial(self._settled, pending, channel))

    def _settled(
        self, pending: _Pending, channel: Approver, task: asyncio.Task[ApprovalAnswer]
    ) -> None:
        if pending.answered.done():
            return
        if task.cancelled():
            pending.failures.append(f"{channel_name(channel)}: the channel closed")
        elif (exc := task.exception()) is not None:
            log.warning("approval channel %s failed: %r", channel_name(channel), exc)
            pending.failures.append(f"{channel_name(channel)}: {str(exc)[:MAX_FAILURE_CHARS]}")
        else:
            pending.answered.set_result(task.result())
            return
        if all(t.done() for t in pending.offers):
            pending.answered.set_result(
                ApprovalAnswer(
                    behavior="deny",
                    reason="no approval channel could ask a person, so it is denied ("
                    + "; ".join(pending.failures)
                    + ")",
                    channel="no approver",
                )
            )

    def _withdraw(self, channel: Approver, question_id: str, answer: ApprovalAnswer) -> None:
        withdraw = getattr(channel, "withdraw", None)
        if withdraw is None:
            return
        try:
            result = withdraw(question_id, answer)
        except Exception:
            log.exception(
                "approval channel %s failed to withdraw a question", channel_name(channel)
            )
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(_bounded(result, channel))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        """Wait (bounded) for the channels' background withdrawals to finish."""
        if self._background:
            await asyncio.wait(self._background, timeout=WITHDRAW_TIMEOUT_S)


def _has_result(future: asyncio.Future[ApprovalAnswer]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


async def _bounded(awaitable: Awaitable[object], channel: Approver) -> None:
    try:
        await asyncio.wait_for(awaitable, WITHDRAW_TIMEOUT_S)
    except Exception:
        log.warning("approval channel %s: withdrawing a question failed", channel_name(channel))
