"""What the broker needs from the host side: the `BrokerHost` protocol.

Owns the seam between one subagent's broker and the run (`runtime.host.TaskHost`
implements it): what the broker hands over and what it waits for."""

from __future__ import annotations

from typing import Protocol

from orchestrator.broker import wire_models
from orchestrator.broker.budget import Budget
from orchestrator.broker.calls import ApprovedCall
from orchestrator.broker.forwarding_policy import ForwardDecision
from orchestrator.jsontypes import JSONObject


class BrokerHost(Protocol):
    """What the broker needs from the host side (`runtime.host.TaskHost` implements it)."""

    async def answer_tool_call(
        self, request: wire_models.PermissionRequest
    ) -> wire_models.PermissionResponse:
        """Decide one tool call; may wait for a human."""
        ...

    async def delegate(self, request: wire_models.DelegateRequest) -> wire_models.DelegateResponse:
        """Carry out a nested Task call."""
        ...

    async def on_event(self, event: wire_models.EventRequest) -> None: ...

    async def on_transcript(self, messages: list[JSONObject], turn: int) -> None:
        """Store a checkpoint; it is data, nothing on the host acts on its content."""
        ...

    async def on_tool_finished(self, call: ApprovedCall, response: JSONObject) -> None:
        """A call the gate approved has a result (PostToolUse)."""
        ...

    async def on_result(self, result: wire_models.ResultRequest) -> None: ...

    async def on_rejected(self, endpoint: str, status: int, reason: str) -> None:
        """A request from the container was refused (recorded for the audit)."""
        ...

    async def on_forwarding(self, decisions: list[ForwardDecision]) -> None:
        """Forwarding decisions on server tools, MCP servers, betas, fields (audited)."""
        ...

    async def on_usage(self, budget: Budget) -> None:
        """A model call was counted against the budget."""
        ...

    async def on_notice(self, kind: str, message: str) -> None:
        """A limit was hit (flood, connections, peers); called once per kind."""
        ...
