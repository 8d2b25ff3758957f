"""The broker's view of the host for one task (implements `BrokerHost`).

It turns what a subagent's broker reports into host actions: permission
decisions go to the run's gate, nested tasks to `delegate` (the TaskManager's
`run_child`, handed in: the host never holds the manager); events, transcripts,
usage, limits and forwarding decisions are recorded. Transcripts
are stored as data only: PostToolUse hooks run on `on_tool_finished`, which the
broker calls only for calls the gate approved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from orchestrator.behavior import FinalBehavior
from orchestrator.broker import ApprovedCall, Budget, ForwardDecision, wire_models
from orchestrator.errors import WardenError
from orchestrator.jsontypes import JSONObject

if TYPE_CHECKING:
    from orchestrator.runtime.protocols import PermissionGate
    from orchestrator.runtime.records import TaskRecorder
    from orchestrator.runtime.tasks import TaskContext, TaskInput, TaskResult
    from orchestrator.store import Store

Delegate = Callable[["TaskInput", "TaskContext"], Awaitable["TaskResult"]]
"""Runs a nested task under its parent to the end (`TaskManager.run_child`)."""

log = logging.getLogger(__name__)

FORWARDING_AUDIT_SOURCE = "broker forwarding"
"""`source` of audit records about what the broker forwarded upstream."""


class TaskHost:
    """Host side of one task's broker."""

    def __init__(
        self,
        ctx: TaskContext,
        *,
        gate: PermissionGate,
        recorder: TaskRecorder,
        store: Store | None,
        delegate: Delegate,
    ) -> None:
        self.ctx = ctx
        self.gate = gate
        self.recorder = recorder
        self.store = store
        self._delegate = delegate

    async def answer_tool_call(
        self, request: wire_models.PermissionRequest
    ) -> wire_models.PermissionResponse:
        await self.ctx.announced.wait()
        return await self.gate.answer_tool_call(self.ctx, request)

    async def delegate(self, request: wire_models.DelegateRequest) -> wire_models.DelegateResponse:
        """A nested Task call: same checks and caps as the root's, run in the foreground."""
        from orchestrator.runtime.tasks import TaskInput

        try:
            task_input = TaskInput.model_validate(request.input)
        except ValueError as exc:
            return wire_models.DelegateResponse(text=f"Invalid Task input: {exc}", is_error=True)
        if task_input.fork:
            return wire_models.DelegateResponse(
                text="Task failed. Error: fork mode is for the parent agent's Task calls; "
                "leave out fork to start a fresh subagent.",
                is_error=True,
            )
        try:
            result = await self._delegate(
                task_input.model_copy(update={"run_in_background": False}), self.ctx
            )
        except WardenError as exc:
            return wire_models.DelegateResponse(text=f"Task failed. Error: {exc}", is_error=True)
        return wire_models.DelegateResponse(text=result.render(), is_error=result.is_error)

    async def on_event(self, event: wire_models.EventRequest) -> None:
        await self.ctx.announced.wait()  # after task_started, whatever the runner's pace
        if event.kind == "tool_started":
            self.ctx.current_tool = (
                f"{event.tool_name}: {event.detail}" if event.detail else event.tool_name
            )
        elif event.kind == "tool_finished":
            self.ctx.current_tool = None
        # Not waited for: the runner's next request (often a permission) is answered
        # without queueing behind this write (`EventLog.record_for`).
        self.recorder.note(
            "task_running",
            self.ctx,
            event=event.kind,
            tool_name=event.tool_name,
            tool_use_id=event.tool_use_id,
            detail=event.detail,
            is_error=event.is_error,
        )

    async def on_transcript(self, messages: list[JSONObject], turn: int) -> None:
        store = self.store
        if store is not None:
            await asyncio.to_thread(store.checkpoint_transcript, self.ctx.task_id, messages, turn)

    async def on_tool_finished(self, call: ApprovedCall, response: JSONObject) -> None:
        from orchestrator.permissions import ToolCall

        await self.gate.tool_finished(
            self.ctx,
            ToolCall(
                tool_name=call.tool_name, tool_input=call.tool_input, tool_use_id=call.tool_use_id
            ),
            response,
        )

    async def on_result(self, result: wire_models.ResultRequest) -> None:
        self.ctx.result = result

    async def on_rejected(self, endpoint: str, status: int, reason: str) -> None:
        await self.recorder.emit(
            "broker_rejected", self.ctx, endpoint=endpoint, status=status, reason=reason[:500]
        )

    async def on_notice(self, kind: str, message: str) -> None:
        await self.recorder.emit("broker_notice", self.ctx, notice=kind, message=message[:500])

    async def on_usage(self, budget: Budget) -> None:
        # a model answer: the calls that follow are the new response's
        self.gate.model_answered(self.ctx)
        self.ctx.tokens = budget.tokens_used
        await self.recorder.update(self.ctx.task_id, tokens=budget.tokens_used)

    async def on_forwarding(self, decisions: list[ForwardDecision]) -> None:
        store = self.store
        if store is None:
            return
        from orchestrator.store import audit_record

        for decision in decisions:
            behavior: FinalBehavior = "allow" if decision.allowed else "deny"
            record = audit_record(
                run_id=self.ctx.run_id,
                task_id=self.ctx.task_id,
                agent_type=self.ctx.agent_type,
                tool_name=decision.subject[:100],
                tool_input=decision.detail,
                decision=behavior,
                final=behavior,
                decided_by=decision.decided_by,
                source=FORWARDING_AUDIT_SOURCE,
                reason=decision.reason,
            )
            await asyncio.to_thread(store.record_audit, record)
