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
    from orchestrator.permissions import EffectivePolicy
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
    """Tasks that do not work in the shared workspace: those with a copy of their
    own, and the tasks started inside one (they never take a warm sandbox)."""
    copies: dict[str, WorkingCopy] = field(default_factory=dict)
    own: set[str] = field(default_factory=set)
    """Tasks that get a working copy of their own."""
    inside: dict[str, str] = field(default_factory=dict)
    """A task started by a task that works in a copy → that parent's task id."""
    workdir: dict[str, Path] = field(default_factory=dict)
    """What each task working in a copy mounts as /workspace (its own copy, or the
    copy of the isolated task it was started inside)."""

    def choose(self, task_id: str, *asked: str | None, parent_id: str | None = None) -> None:
        """Mark `task_id` isolated when its Task call, its agent file or the run's
        default asks for `worktree` (first given wins). A task started inside a task
        that works in a copy works in that copy too: it sees it, and what it changes
        is part of the parent's change set (reviewed with it); one that asks for its
        own copy gets a copy of the parent's, applied into the parent's."""
        chosen = next((a for a in asked if a is not None), None)
        if self.apply is None:
            if chosen == "worktree":
                raise TaskRefusedError(
                    "isolation: worktree needs a run with reviewed apply (warden run); "
                    "leave out isolation to work in the shared workspace"
                )
            return
        if parent_id is not None and parent_id in self.workdir:
            self.inside[task_id] = parent_id
            self.isolated.add(task_id)
        if self.apply.wants_copy(*asked):
            self.own.add(task_id)
            self.isolated.add(task_id)

    async def prepare(self, ctx: TaskContext) -> Path | None:
        """The task's working copy (made now), its parent's copy for a task started
        inside one, or None for a task in the shared workspace."""
        if ctx.task_id not in self.isolated or self.apply is None:
            return None
        parent = self.inside.get(ctx.task_id)
        source = self.workdir.get(parent) if parent is not None else None
        if ctx.task_id not in self.own:
            if source is None:  # its parent's copy is gone: never the shared workspace
                raise WardenError(
                    f"the working copy of {parent} (which started {ctx.task_id}) is gone"
                )
            self.workdir[ctx.task_id] = source
            return source
        apply = self.apply
        copy = await asyncio.to_thread(
            lambda: apply.make_copy(
                run_id=ctx.run_id,
                task_id=ctx.task_id,
                agent=ctx.agent_type,
                session=self.session,
                owner=(self.identity.uid, self.identity.gid),
                source=source,
            )
        )
        self.copies[ctx.task_id] = copy
        self.workdir[ctx.task_id] = copy.work
        return copy.work

    async def conclude(
        self,
        ctx: TaskContext,
        result: TaskResult,
        recorder: TaskRecorder,
        *,
        rules: EffectivePolicy | None = None,
    ) -> TaskResult:
        """`result` with what became of the task's changes (its sandbox is gone).
        `rules`: the policy the task's calls were decided by, which its change set's
        paths are held to (None: the run's)."""
        copy = self.copies.pop(ctx.task_id, None)
        self.isolated.discard(ctx.task_id)
        self.own.discard(ctx.task_id)
        self.workdir.pop(ctx.task_id, None)
        nested = self.inside.pop(ctx.task_id, None) is not None
        if copy is None or self.apply is None:
            return result
        try:
            decision = await self.apply.conclude(
                copy,
                rules=rules,
                nested=nested,
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
