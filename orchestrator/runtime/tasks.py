"""What a task is: the `Task` tool's input, a task's status, its live context
and the result its parent gets. Data only: the manager that runs tasks is
`orchestrator.runtime.manager`, the broker adapter `orchestrator.runtime.host`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.jsontypes import JSONObject
from orchestrator.schema_docs import documented
from orchestrator.store.records import ACTIVE_TASK_STATUSES
from orchestrator.store.records import TaskStatus as TaskStatus  # defined once, in the store

if TYPE_CHECKING:
    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.broker import (
        Broker,
        wire_models,  # not at run time: `warden mcp` lists TaskInput early
    )
    from orchestrator.runtime.admission import Ticket

TASK_ID_PREFIX = "sa_"
TASK_ID_BYTES = 12
"""Random bytes in a task id: unguessable, so an old or invented id finds nothing."""


def new_task_id() -> str:
    return TASK_ID_PREFIX + secrets.token_hex(TASK_ID_BYTES)


ACTIVE_STATUSES = ACTIVE_TASK_STATUSES
"""A task in these may still start or run a container."""


TASK_MODELS = ("sonnet", "opus", "haiku", "inherit")
TaskModel = Literal["sonnet", "opus", "haiku", "inherit"]
TaskMode = Literal["acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "plan"]
TaskIsolation = Literal["worktree", "remote"]


class TaskInput(BaseModel):
    """The `Task` tool's input, as the model sends it (Claude Code's Agent input,
    plus warden's `max_turns`, `session_id` and `fork`). The field docstrings are the
    descriptions the model sees (`parent_tools`). Unknown fields are ignored, as the
    pinned Claude Code ignores them (`unknown_fields` names them for a warning)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=documented)

    description: str = Field(min_length=1, max_length=200)
    """A short (3-5 word) description of the task."""
    prompt: str = Field(min_length=1, max_length=100_000)
    """The task for the subagent: all it will know."""
    subagent_type: str = Field(default="general-purpose", min_length=1, max_length=100)
    """The type of agent to use (general-purpose when absent)."""
    model: TaskModel | None = None
    """Model for this task (sonnet, opus, haiku; inherit: yours); it takes precedence
    over the agent type's model."""
    name: str | None = Field(default=None, min_length=1, max_length=100)
    """A name for the subagent, shown with it while it runs."""
    mode: TaskMode | None = None
    """Permission mode for the subagent; it can only make the mode in force stricter."""
    isolation: TaskIsolation | None = None
    """Claude Code's isolation: `worktree` runs the subagent in its own working copy of
    the workspace; its changes are applied only after policy (and, by default, a
    person) has seen them. `remote` is not available."""
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    """Lower the agent's turn cap for this task (never raise it)."""
    run_in_background: bool | None = None
    """Return at once with a task id; the result arrives later. Absent: the agent
    type's `background` setting."""
    session_id: str | None = Field(default=None, max_length=100)
    """Resume that subagent session (its task id) instead of starting a new one."""
    fork: bool | None = None
    """Fork mode: the subagent starts from this whole conversation (and its prompt
    cache) instead of a fresh one; the prompt is its directive. Off by default."""


def call_overrides(
    agent: AgentDefinition, task_input: TaskInput
) -> tuple[AgentDefinition, list[str]]:
    """The agent type as this call narrows it (its `mode`, never wider than the
    type's own `permissionMode`), and warnings about what the call or the type asked
    that warden does not do. TaskRefusedError for `isolation: remote`."""
    from orchestrator.errors import TaskRefusedError
    from orchestrator.permissions.policy import MODE_STRICTNESS

    warnings: list[str] = []
    mode = task_input.mode
    if task_input.isolation == "remote":
        raise TaskRefusedError(
            "isolation: remote (a cloud environment) is not available in warden; leave "
            "out isolation to run the subagent in its own local sandbox"
        )
    if mode == "auto":
        warnings.append(
            "mode auto (Claude Code's classifier mode) does not exist in warden; the mode "
            "in force stays"
        )
        return agent, warnings
    current = agent.permission_mode
    if mode is not None and (current is None or MODE_STRICTNESS[mode] > MODE_STRICTNESS[current]):
        return agent.model_copy(update={"permission_mode": mode}), warnings
    return agent, warnings


def unknown_fields(raw: Mapping[str, object]) -> list[str]:
    """The keys of a Task call's input that `TaskInput` does not read (ignored)."""
    return [key for key in raw if key not in TaskInput.model_fields]


@dataclass(frozen=True)
class ForkPrefix:
    """What a fork-mode subagent's conversation begins with: the parent's request as
    the parent sent it (system prompt, tool definitions, messages so far, model)."""

    model: str
    system_prompt: str
    tool_definitions: list[JSONObject]
    messages: list[JSONObject]
    """Ending with the parent's assistant message that holds the Task call."""


class TaskResult(BaseModel):
    """What a finished task gives its parent (the Python API's typed result)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    session_id: str
    agent_type: str
    status: TaskStatus
    text: str = ""
    """The subagent's final answer (empty unless completed)."""
    error: str | None = None
    duration_s: float = 0.0
    timeout_s: float | None = None
    turns: int = 0
    tokens: int = 0
    usage: dict[str, int] = Field(default_factory=dict)
    """`tokens` by usage field (input_tokens, cache_creation_input_tokens,
    cache_read_input_tokens, output_tokens)."""
    queued_s: float | None = None
    """How long it waited for a slot behind max_concurrent_total; None: not queued."""
    changes: str | None = None
    """With `isolation: worktree`: what became of its changes (applied, rejected and
    why, pending review, conflicted); None for a task in the shared workspace."""

    def render(self) -> str:
        """The tool-result text the parent's model receives. Stable wording."""
        text = self._outcome()
        if self.queued_s is not None:
            text += (
                f"\n(It was queued for {self.queued_s:.1f} s: the "
                "max_concurrent_total cap of subagents running at once was reached.)"
            )
        if self.changes is not None:
            text += f"\n{self.changes}"
        return text

    def _outcome(self) -> str:
        match self.status:
            case TaskStatus.COMPLETED:
                return f"Task Succeeded. Result: {self.text}"
            case TaskStatus.NO_OUTPUT:
                return "Task completed but returned no output."
            case TaskStatus.TIMED_OUT:
                return f"Task timed out after {self.timeout_s or self.duration_s:g} s."
            case TaskStatus.STOPPED:
                return "Task was stopped before it finished."
            case TaskStatus.INTERRUPTED:
                return "Task was interrupted (the orchestrator stopped); it can be resumed."
            case _:
                return f"Task failed. Error: {self.error or 'unknown error'}"

    @property
    def is_error(self) -> bool:
        return self.status not in (TaskStatus.COMPLETED, TaskStatus.NO_OUTPUT)


@dataclass
class TaskContext:
    """Live state of one task, shared by its broker, the manager and the display."""

    task_id: str
    session_id: str
    run_id: str
    trace_id: str
    parent_id: str | None
    depth: int
    agent: AgentDefinition
    description: str
    timeout_s: float
    name: str | None = None
    """The Task call's `name`, if it gave one."""
    started: float = field(default_factory=time.monotonic)
    status: TaskStatus = TaskStatus.PENDING
    container_id: str | None = None
    current_tool: str | None = None
    result: wire_models.ResultRequest | None = None
    broker: Broker | None = None
    stop_requested: bool = False
    tokens: int = 0
    """Tokens its model calls used so far (every usage field)."""
    ticket: Ticket | None = None
    """Its place in the admission queue (see `orchestrator.runtime.admission`)."""
    call_id: str | None = None
    """The id of the parent agent's Task tool call that started it (`tool_use_id`), for
    the trace's `execute_tool Task` span; None for a nested or resumed task."""
    announced: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    """Set once its `task_started` is recorded (or it ends): what its broker reports
    waits for it, so a warm runner's first events never come before the task's start."""

    @property
    def agent_type(self) -> str:
        return self.agent.name
