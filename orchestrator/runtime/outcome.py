"""How a task ended, as the `TaskResult` its parent gets.

What the host saw wins over what the container said: a disk-limit kill, a stop,
a host-side failure, the deadline and the broker's budget are decided from the
host's own records; the runner's posted result only says whether an answer was
given, and its error text only when the host has nothing better. A failed model
call is described from what the broker saw upstream (`model_errors`).
"""

from __future__ import annotations

import time

from orchestrator.backend.contract import SandboxResult, SandboxStatus
from orchestrator.broker import Budget
from orchestrator.runtime.model_errors import from_upstream
from orchestrator.runtime.tasks import TaskContext, TaskResult, TaskStatus

STDERR_TAIL_CHARS = 2_000
"""How much of a failed runner's stderr goes into the error message."""
REMOVED_ERROR = (
    "the subagent's container was removed from outside warden (e.g. `docker rm -f`) "
    "while it ran; its transcript so far is kept: resume the session to continue"
)


def task_result(
    ctx: TaskContext,
    sandbox: SandboxResult | None,
    budget: Budget | None,
    failure: str | None,
) -> TaskResult:
    """The result of a task that ended: `sandbox` is how its container ended (None:
    it never ran), `failure` a host-side error that stopped it."""
    duration = time.monotonic() - ctx.started
    ticket = ctx.ticket

    def result(status: TaskStatus, *, text: str = "", error: str | None = None) -> TaskResult:
        return TaskResult(
            task_id=ctx.task_id,
            session_id=ctx.session_id,
            agent_type=ctx.agent_type,
            status=status,
            text=text,
            error=error,
            duration_s=round(duration, 3),
            timeout_s=ctx.timeout_s,
            turns=budget.turns_used if budget else 0,
            tokens=budget.tokens_used if budget else 0,
            usage=dict(budget.usage) if budget else {},
            queued_s=round(ticket.waited_s, 3) if ticket and ticket.queued else None,
        )

    posted = ctx.result
    if sandbox is not None and sandbox.status is SandboxStatus.DISK_LIMIT:
        return result(TaskStatus.DISK_LIMIT, error=sandbox.reason)
    # Killed by TaskStop, Ctrl-C, or `warden stop` from another process.
    if ctx.stop_requested or (sandbox is not None and sandbox.status is SandboxStatus.KILLED):
        return result(TaskStatus.STOPPED)
    if failure is not None:
        return result(TaskStatus.FAILED, error=failure)
    if sandbox is not None and sandbox.status is SandboxStatus.KILLED_OUTSIDE:
        return result(TaskStatus.FAILED, error=outside_kill_error(sandbox.reason))
    if sandbox is not None and sandbox.status is SandboxStatus.TIMED_OUT:
        return result(TaskStatus.TIMED_OUT, error="deadline passed")
    if posted is not None and posted.status == "completed":
        if not posted.text.strip():
            return result(TaskStatus.NO_OUTPUT)
        return result(TaskStatus.COMPLETED, text=posted.text)
    if budget is not None and budget.exhausted is not None:  # the host's word
        return result(TaskStatus.FAILED, error=budget.exhausted)
    if posted is not None:
        # A failed model call is told from what the host saw upstream.
        upstream = from_upstream(ctx.broker.model_failures if ctx.broker else None)
        return result(TaskStatus.FAILED, error=upstream or posted.error or "subagent failed")
    return result(TaskStatus.FAILED, error=exit_error(sandbox))


def outside_kill_error(reason: str) -> str:
    """A container killed by someone else (`docker kill`, `docker stop`): not a stop
    anyone asked warden for."""
    return (
        f"the subagent's container was {reason or 'killed from outside warden'} while it "
        "ran; its transcript so far is kept: resume the session to continue"
    )


def exit_error(sandbox: SandboxResult | None) -> str:
    """Why a container that posted no result ended, in words."""
    if sandbox is None:
        return "the subagent's container did not start"
    if sandbox.status is SandboxStatus.OOM_KILLED:
        return "the subagent's container ran out of memory and was killed"
    if sandbox.status is SandboxStatus.KILLED:
        return "the subagent's container was killed"
    if sandbox.status is SandboxStatus.REMOVED:
        return REMOVED_ERROR
    if sandbox.status is SandboxStatus.KILLED_OUTSIDE:
        return outside_kill_error(sandbox.reason)
    tail = sandbox.stderr[-STDERR_TAIL_CHARS:].strip()
    return f"the subagent exited with code {sandbox.exit_code} without a result" + (
        f"; its last output: {tail}" if tail else ""
    )
