"""The run's side of `isolation: worktree`: which tasks get their own working
copy, making it before the sandbox starts, and, once the sandbox is gone, handing
the copy to the reviewed apply (`orchestrator.apply`) and telling the parent what
became of the changes (`TaskResult.changes`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.apply.changeset import ApplyDecision
from orchestrator.apply.review import ReviewedApply
from orchestrator.apply.workcopy import WorkingCopy
from orchestrator.errors import TaskRefusedError, WardenError
from orchestrator.store import TaskStatus

if TYPE_CHECKING:
    from orchestrator.broker import SandboxIdentity
    from orchestrator.runtime.records import TaskRecorder
    from orchestrator.runtime.tasks import TaskContext, TaskResult

log = logging.getLogger(__name__)

ENDED_ON_ITS_OWN = (TaskStatus.COMPLETED, TaskStatus.NO_OUTPUT)


@dataclass
class Worktrees:
    """The isolated tasks of one run and their working copies."""

    apply: ReviewedApply | None
    """None: the run offers no reviewed apply (a task asking for a worktree is refused)."""
    session: str
    identity: SandboxIdentity
    isolated: set[str] = field(default_factory=set)
    copies: dict[str, WorkingCopy] = field(default_factory=dict)

    def choose(self, task_id: str, *asked: str | None) -> None:
        """Mark `task_id` isolated when its Task call, its agent file or the run's
        default asks for `worktree` (first given wins)."""
        chosen = next((a for a in asked if a is not None), None)
        if self.apply is None:
            if chosen == "worktree":
                raise TaskRefusedError(
                    "isolation: worktree needs a run with reviewed apply (warden run); "
                    "leave out isolation to work in the shared workspace"
                )
            return
        if self.apply.wants_copy(*asked):
            self.isolated.add(task_id)

    async def prepare(self, ctx: TaskContext) -> Path | None:
        """The task's working copy (made now), or None for a task in the shared workspace."""
        if ctx.task_id not in self.isolated or self.apply is None:
            return None
        apply = self.apply
        copy = await asyncio.to_thread(
            lambda: apply.make_copy(
                run_id=ctx.run_id,
                task_id=ctx.task_id,
                agent=ctx.agent_type,
                session=self.session,
                owner=(self.identity.uid, self.identity.gid),
            )
        )
        self.copies[ctx.task_id] = copy
        return copy.work

    async def conclude(
        self, ctx: TaskContext, result: TaskResult, recorder: TaskRecorder
    ) -> TaskResult:
        """`result` with what became of the task's changes (its sandbox is gone)."""
        copy = self.copies.pop(ctx.task_id, None)
        self.isolated.discard(ctx.task_id)
        if copy is None or self.apply is None:
            return result
        try:
            decision = await self.apply.conclude(
                copy,
                completed=result.status in ENDED_ON_ITS_OWN,
                question={
                    "task_id": ctx.task_id,
                    "agent_type": ctx.agent_type,
                    "description": ctx.description,
                    "run_id": ctx.run_id,
                    "chain": (ctx.task_id,),
                },
            )
        except (WardenError, OSError) as exc:
            log.warning("the changes of %s could not be decided: %s", ctx.task_id, exc)
            text = (
                f"Worktree isolation: its changes could not be read ({exc}); they stay in "
                f"its working copy (warden ps, warden apply {ctx.task_id})."
            )
            return result.model_copy(update={"changes": text})
        await self._announce(ctx, decision, recorder)
        text = (
            "Worktree isolation: it changed nothing." if decision is None else decision.for_parent()
        )
        return result.model_copy(update={"changes": text})

    async def _announce(
        self, ctx: TaskContext, decision: ApplyDecision | None, recorder: TaskRecorder
    ) -> None:
        if decision is None:
            return
        await recorder.emit(
            "apply_decided",
            ctx,
            outcome=decision.outcome,
            change_set_sha256=decision.change_set_sha256,
            decided_by=decision.decided_by,
            applied=list(decision.applied),
            conflicts=list(decision.conflicts),
            reasons=[r.model_dump(mode="json") for r in decision.reasons],
        )
