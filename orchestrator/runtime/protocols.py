"""What the task manager needs from its collaborators, as small Protocols: a gate
that decides tool calls (`PermissionGate`), somewhere to send events
(`EventSink`), and a way to find the image an agent runs in
(`ImageResolver`). `AllowAgentTools` is the minimal gate.

The real implementations live elsewhere (`gate.PolicyGate`, `events.EventLog`,
`images.resolve_image`); tests pass their own. `EventSink` is defined on the lowest
floor that reports events (`orchestrator.event_sink`) and named here for the manager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from orchestrator.broker import wire_models
from orchestrator.broker.forwarding_policy import ForwardingPolicy
from orchestrator.event_sink import EventSink
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import EffectivePolicy

if TYPE_CHECKING:
    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.images.choice import SandboxImage
    from orchestrator.permissions import ToolCall
    from orchestrator.permissions.approvers import Asker
    from orchestrator.runtime.tasks import TaskContext

__all__ = ["AllowAgentTools", "EventSink", "ImageResolver", "PermissionGate"]

ImageResolver = Callable[["AgentDefinition"], "SandboxImage"]
"""The image an agent's sandbox runs (the run's precedence applied, `agents.images`),
with the runner command and mounts that image needs (`images.choice`)."""


class PermissionGate(Protocol):
    """Decides the tool calls of one task (`runtime.gate.PolicyGate` implements it, with
    the permissions layer's engine), and says what the run's other decisions follow:
    egress and a dev container build take their domain rules and mode from `policy`,
    and ask a person through `asker`."""

    @property
    def policy(self) -> EffectivePolicy:
        """The run's own policy (a gate without one: `dontAsk`, no rules)."""
        ...

    @property
    def asker(self) -> Asker | None:
        """Who asks a person about what a task does that is not a tool call (an egress
        connection); None: nobody, such a question gets the mode's answer, deny."""
        ...

    async def answer_tool_call(
        self, task: TaskContext, request: wire_models.PermissionRequest
    ) -> wire_models.PermissionResponse:
        """Allow or deny one call; may wait for a person. Never raises for a denial."""
        ...

    async def tool_finished(self, task: TaskContext, call: ToolCall, response: JSONObject) -> None:
        """A call this gate allowed has finished (PostToolUse); `response` is data."""
        ...

    def model_answered(self, task: TaskContext) -> None:
        """The task's model answered (a new response's tool calls follow): what a
        skill loaded in the previous response allowed ends here."""
        ...

    def forwarding_policy(self, task: TaskContext) -> ForwardingPolicy:
        """What this task's broker may forward to the model API."""
        ...

    def task_policy(self, task: TaskContext) -> EffectivePolicy:
        """The rules and mode `task`'s calls are decided by (the run's policy as its
        agent file and its ancestors narrow it): what its change set is held to when
        it works in its own copy (`isolation: worktree`)."""
        ...

    def task_denial(self, subagent_type: str) -> str | None:
        """Why the run's own policy refuses to start a subagent of this type (a
        `Task(type)` deny rule, as Claude Code honours it for its Task tool), or None.
        Asked for the parent's Task calls and the library's; a subagent's Task calls
        are decided like any other tool call."""
        ...


class AllowAgentTools:
    """The minimal gate: a tool in the agent's definition is allowed (the broker
    already refuses tools outside the definition); nothing runs after a call,
    forwarding follows the broker's defaults, and there is nobody to ask (egress
    allows only what a domain rule of the run allows)."""

    policy = EffectivePolicy(mode="dontAsk")
    asker = None

    async def answer_tool_call(
        self, task: TaskContext, request: wire_models.PermissionRequest
    ) -> wire_models.PermissionResponse:
        return wire_models.PermissionResponse(
            behavior="allow", reason="tool is in the agent definition"
        )

    async def tool_finished(self, task: TaskContext, call: ToolCall, response: JSONObject) -> None:
        return None

    def model_answered(self, task: TaskContext) -> None:
        return None

    def task_policy(self, task: TaskContext) -> EffectivePolicy:
        return self.policy

    def forwarding_policy(self, task: TaskContext) -> ForwardingPolicy:
        return ForwardingPolicy()

    def task_denial(self, subagent_type: str) -> str | None:
        return None
