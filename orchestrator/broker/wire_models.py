"""The host's strict models of everything that crosses the broker socket.

The runner in the sandbox builds these documents with the standard library
(`sandbox_tools.wire`: the field names, as TypedDicts, and the limits); the
host never trusts them. Every document from a container is size-capped before
parsing and validated here: closed models (unknown fields are refused), bounded
strings and lists, literal kinds. A unit test (`test_wire_contract`) checks
that these models and the runner's TypedDicts name the same fields and that
what the runner's encoders build is accepted here, so the two cannot drift.
What the host sends back (`TaskSpec`, `PermissionResponse`,
`DelegateResponse`, `Ack`, errors) is built from these models too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.behavior import FinalBehavior
from orchestrator.jsontypes import JSONObject
from sandbox_tools import conversation, wire


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class McpServerLaunch(_Wire):
    """One MCP server a runner starts (`sandbox_tools.wire_answers.McpServer`)."""

    name: str = Field(min_length=1, max_length=100)
    transport: Literal["stdio", "http", "sse"] = "stdio"
    command: str = ""
    """A stdio server's program, run inside the sandbox."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Added to the server's environment (the host's own environment never is)."""
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    tools: list[str] | None = None
    """The `mcp__…` names of its tools this subagent is offered; None: all of them."""
    denied: list[str] = Field(default_factory=list, max_length=wire.MAX_MCP_DENIED)
    """Patterns (`wire.mcp_name_glob`) of its tools this subagent is not offered."""


class SkillSpec(_Wire):
    """One skill the `Skill` tool may load, as Claude Code gives it."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=wire.MAX_SKILL_DESCRIPTION_CHARS)
    directory: str = Field(max_length=4096)
    """Its directory as the subagent sees it (`Base directory for this skill`)."""
    text: str = Field(max_length=wire.MAX_SKILL_CHARS)
    """SKILL.md without its frontmatter."""
    invocable: bool = True
    """False for `disable-model-invocation: true`: not listed, and the tool refuses it."""


class TaskSpec(_Wire):
    """What a runner needs to start its loop; served by `GET /v1/spec`."""

    task_id: str
    """The task's id (`sa_…`)."""
    parent_id: str | None = None
    """The delegating task's id; None when the parent is the root agent."""
    trace_id: str
    """Shared by every task of one run."""
    agent_type: str
    """The subagent type, e.g. `general-purpose`."""
    description: str = ""
    """The parent's short description of the task."""
    model: str
    """Model name for `/v1/messages`."""
    system_prompt: str
    """The agent definition's system prompt."""
    prompt: str
    """The task prompt: the only thing the subagent learns from its parent."""
    history: list[JSONObject] = Field(default_factory=list)
    """Earlier messages of this session when resuming; empty for a new task."""
    tools: list[str]
    """Tool names this subagent may use (a subset of TOOL_NAMES + DELEGATION_TOOL_NAMES)."""
    max_turns: int = Field(ge=1)
    """Model calls allowed; the broker refuses the one past it."""
    max_tokens: int = Field(default=wire.DEFAULT_MAX_TOKENS, ge=1)
    """`max_tokens` for each model call."""
    bash_timeout_s: float = Field(default=wire.DEFAULT_BASH_TIMEOUT_S, gt=0)
    """Default timeout of one Bash tool call."""
    context_window_tokens: int = Field(default=wire.DEFAULT_CONTEXT_WINDOW_TOKENS, ge=1000)
    """The model's context window: the runner keeps each request inside it."""
    tool_definitions: list[JSONObject] = Field(default_factory=list)
    """Fork mode: the parent's tool definitions, sent as they are so the subagent's
    requests begin with the parent's cached prefix; empty: built from `tools`."""
    context_before: list[JSONObject] = Field(default_factory=list)
    """Content blocks before the prompt in a new task's first message (the CLAUDE.md
    files and the date, as a system reminder)."""
    context_after: list[JSONObject] = Field(default_factory=list)
    """Content blocks after the prompt in a new task's first message (preloaded skills)."""
    skill_listing: str = Field(default="", max_length=wire.MAX_SKILL_LISTING_CHARS)
    """A new task's skill listing, sent as Claude Code sends it: a `system`-role message
    right after the first user message (`conversation.with_listing`); the broker
    accepts no other system-role message (`conversation.misplaced_system`)."""
    environment: bool = False
    """The runner adds its environment details (working directory, platform, date,
    git repository or not) to the system prompt."""
    git_status: bool = False
    """The runner adds a git status snapshot of the workspace to the system prompt
    (taken inside the sandbox, where the workspace's git config can reach nothing)."""
    mcp_servers: list[McpServerLaunch] = Field(
        default_factory=list, max_length=wire.MAX_MCP_SERVERS
    )
    """MCP servers the runner starts inside the sandbox; their tools are offered as
    `mcp__<server>__<tool>` and every call is put to the host like any other."""
    mcp_startup_timeout_s: float = Field(default=wire.DEFAULT_MCP_STARTUP_TIMEOUT_S, gt=0)
    """How long a server may take to answer `initialize` and `tools/list`."""
    mcp_tool_timeout_s: float = Field(default=wire.DEFAULT_MCP_TOOL_TIMEOUT_S, gt=0)
    """How long one MCP tool call may take."""
    skills: list[SkillSpec] = Field(default_factory=list, max_length=wire.MAX_SKILLS)
    """Skills the subagent's `Skill` tool may load (trusted content, read by the host)."""
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    """`output_config.effort` of every model call, as Claude Code sends an agent's
    `effort` (`agents.keys.request_effort`); None: not sent (the API's default)."""
    model_max_retries: int = Field(default=wire.DEFAULT_MODEL_MAX_RETRIES, ge=0, le=100)
    """Retries of one model call on 429/5xx/529 (the host SDK's retry layer)."""
    model_retry_total_s: float = Field(default=wire.DEFAULT_MODEL_RETRY_TOTAL_S, gt=0)
    """Longest one model call keeps retrying, from its first attempt."""

    def system_message(self) -> str | None:
        """The text of the one `system`-role message the runner sends for this spec:
        a resumed (or forked) conversation's own, else the new task's skill listing;
        None when it sends none."""
        if self.history:
            found = conversation.leading_system(self.history)
            return str(found["content"]) if found is not None else None
        return self.skill_listing or None


class EventRequest(_Wire):
    """Progress the runner reports; shown live and written to the run's events."""

    kind: wire.EventKind
    tool_name: str | None = Field(default=None, max_length=wire.MAX_TOOL_NAME_CHARS)
    tool_use_id: str | None = Field(default=None, max_length=wire.MAX_TOOL_USE_ID_CHARS)
    detail: str = Field(default="", max_length=wire.MAX_EVENT_DETAIL_CHARS)
    is_error: bool = False


class PermissionRequest(_Wire):
    """Asked before every tool call; the answer may take as long as a human does."""

    tool_use_id: str = Field(max_length=wire.MAX_TOOL_USE_ID_CHARS)
    tool_name: str = Field(max_length=wire.MAX_TOOL_NAME_CHARS)
    tool_input: JSONObject
    events: list[EventRequest] = Field(default_factory=list, max_length=wire.MAX_EVENTS_PER_BATCH)
    """Progress held since the runner's last request, recorded before this call is
    decided (so the host's own events about the call come after them)."""


class PermissionResponse(_Wire):
    behavior: FinalBehavior
    reason: str | None = None
    """Why; for a deny, this is what the model is told."""
    updated_input: JSONObject | None = None
    """Replacement tool input (from a hook); use it instead of the original."""


class EventBatch(_Wire):
    """Events in the order they happened; the runner sends them in the background."""

    events: list[EventRequest] = Field(min_length=1, max_length=wire.MAX_EVENTS_PER_BATCH)


class TranscriptCheckpoint(_Wire):
    """The whole conversation so far; sent after every turn."""

    messages: list[JSONObject]
    turn: int = Field(ge=0)


class ResultRequest(_Wire):
    """The runner's last word."""

    status: wire.ResultStatus
    text: str = Field(default="", max_length=wire.MAX_RESULT_CHARS)
    """The final assistant text (empty when the model returned none)."""
    error: str | None = Field(default=None, max_length=wire.MAX_EVENT_DETAIL_CHARS)


class DelegateRequest(_Wire):
    """A nested `Task` call, carried out by the host."""

    tool_use_id: str = Field(max_length=wire.MAX_TOOL_USE_ID_CHARS)
    input: JSONObject


class DelegateResponse(_Wire):
    text: str
    is_error: bool = False


class Ack(_Wire):
    ok: bool = True


class ErrorDetail(_Wire):
    type: str
    message: str


class ErrorBody(_Wire):
    """Anthropic's error shape: `{"type": "error", "error": {...}}` (`wire.error_body`)."""

    type: Literal["error"] = "error"
    error: ErrorDetail
