"""What a run keeps about its tasks: their rows in the store and their events.

Every task event carries the task's id, parent, agent type and trace id; the
manager, the gate and the broker adapter record through one `TaskRecorder` so
that is said once. A run without a store (tests, the Python API) still emits
events.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Unpack

from orchestrator.runtime.tasks import TaskContext, TaskResult, TaskStatus

if TYPE_CHECKING:
    from orchestrator.jsontypes import JSONLike, JSONObject
    from orchestrator.runtime.protocols import EventSink
    from orchestrator.store import Store, TaskUpdate
    from orchestrator.workspace.changes import TaskChanges

RESULT_PREVIEW_CHARS = 200
"""How much of a task's answer its end event carries (the store keeps it all)."""

END_EVENT = {
    TaskStatus.COMPLETED: "task_completed",
    TaskStatus.NO_OUTPUT: "task_completed",
    TaskStatus.TIMED_OUT: "task_timed_out",
    TaskStatus.STOPPED: "task_stopped",
}
"""The event a task's end is recorded as; any other status is `task_failed`."""


class TaskRecorder:
    """Records tasks in the store (when there is one) and emits their events."""

    def __init__(
        self, events: EventSink, store: Store | None, changes: TaskChanges | None = None
    ) -> None:
        self.events = events
        self.store = store
        self.changes = changes
        """Workspace snapshots around each task: the files it changed (None: not kept)."""

    async def sandbox_starting(self, ctx: TaskContext) -> None:
        """Before anything of the task runs: the workspace as it was."""
        if self.changes is not None:
            await self.changes.begin(ctx.task_id)

    async def emit(self, kind: str, ctx: TaskContext, **data: JSONLike) -> None:
        await self.events.emit_for(kind, ctx, **data)

    def note(self, kind: str, ctx: TaskContext, **data: JSONLike) -> None:
        """An event the caller need not wait for (`EventSink.record_for`)."""
        self.events.record_for(kind, ctx, **data)

    async def update(self, task_id: str, **fields: Unpack[TaskUpdate]) -> None:
        if self.store is not None:
            await asyncio.to_thread(self.store.update_task, task_id, **fields)

    async def task_refused(
        self, tool_use_id: str, tool_input: JSONObject, reason: str, by: str = "parent"
    ) -> None:
        """A Task call warden refused before any task existed (an unknown subagent type,
        a cap, invalid input): a `task_refused` event and a denial in the audit, so CI
        sees it (`denials`, `--fail-on denied`, the JUnit report)."""
        await self.events.emit(
            "task_refused", tool_use_id=tool_use_id, reason=reason, requested_by=by
        )
        if self.store is None:
            return
        from orchestrator.store import audit_record

        record = audit_record(
            run_id=self.events.run_id,
            agent_type=by,
            tool_name="Task",
            tool_use_id=tool_use_id[:200],
            tool_input=tool_input,
            decision="deny",
            final="deny",
            decided_by="warden: Task refused",
            source="warden",
            reason=reason,
        )
        await asyncio.to_thread(self.store.record_audit, record)

    async def created(self, ctx: TaskContext, prompt: str) -> None:
        if self.store is None:
            return
        from orchestrator.store import TaskRecord

        record = TaskRecord(
            task_id=ctx.task_id,
            run_id=ctx.run_id,
            parent_id=ctx.parent_id,
            session_id=ctx.session_id,
            agent_type=ctx.agent_type,
            description=ctx.description,
            prompt=prompt,
            status=TaskStatus.PENDING,
            depth=ctx.depth,
            trace_id=ctx.trace_id,
            created_at=time.time(),
        )
        await asyncio.to_thread(self.store.create_task, record)

    async def finished(self, ctx: TaskContext, result: TaskResult) -> None:
        ctx.status = result.status
        await self.update(
            ctx.task_id,
            status=result.status.value,
            ended_at=time.time(),
            result_text=result.text or None,
            error=result.error,
            tokens=result.tokens,
        )
        # Its sandbox is gone by now: what changed since it started is settled.
        changes = await self.changes.end(ctx.task_id) if self.changes is not None else None
        await self.emit(
            END_EVENT.get(result.status, "task_failed"),
            ctx,
            **(changes.event_data() if changes is not None else {}),
            status=result.status.value,
            duration_s=result.duration_s,
            turns=result.turns,
            tokens=result.tokens,
            usage=result.usage,
            result_preview=result.text[:RESULT_PREVIEW_CHARS],
            error=result.error,
        )
