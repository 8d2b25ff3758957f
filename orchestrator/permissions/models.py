"""The values the permission engine trades in: a tool call, its context, a decision."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.behavior import Behavior
from orchestrator.jsontypes import JSONObject
from sandbox_tools.wire import MCP_RESOURCE_TOOL_NAMES, WORKSPACE

Mode = Literal["default", "acceptEdits", "dontAsk", "plan", "bypassPermissions"]
MODES: tuple[Mode, ...] = ("default", "acceptEdits", "dontAsk", "plan", "bypassPermissions")

READ_TOOLS = frozenset({"Read", "Glob", "Grep"})
"""Tools that only read; allowed by the `default`, `acceptEdits` and `plan` modes."""
NO_PROMPT_TOOLS = frozenset({"Task"})
"""Tools that, as in Claude Code, need no approval by default: a delegated task is
itself bound by the child's policy (its tools ∩ the parent's rules)."""
OWN_STATE_TOOLS = frozenset({"TaskOutput", "TaskStop", "TodoWrite"})
"""Tools that touch only the agent's own state (the background shells an allowed
Bash call started, its todo list): as in Claude Code they need no approval in any
mode, the plan mode included; a deny or ask rule still holds. (`Skill` is decided
as Claude Code decides it: `skill_rules`.)"""
MCP_RESOURCE_TOOLS = frozenset(MCP_RESOURCE_TOOL_NAMES)
"""ListMcpResourcesTool and ReadMcpResourceTool: read-only calls to servers already
running for this subagent. The pinned Claude Code runs them unasked in every mode, the
plan mode included (measured); a deny or ask rule (by their names) still holds."""
EDIT_TOOLS = frozenset({"Edit", "Write", "NotebookEdit"})
"""Tools that change files; allowed inside the workspace by `acceptEdits`."""

REQUIRED_INPUT_KEYS: dict[str, tuple[str, ...]] = {
    "Bash": ("command",),
    "Read": ("file_path",),
    "Write": ("file_path", "content"),
    "Edit": ("file_path", "old_string", "new_string"),
    "Glob": ("pattern",),
    "Grep": ("pattern",),
    "Task": ("description", "prompt", "subagent_type"),
    "TaskOutput": ("task_id",),
    "NotebookEdit": ("notebook_path", "new_source"),
    "TodoWrite": ("todos",),
}
"""Keys each tool's input must carry (Claude Code's schemas); checked on `updatedInput`."""


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Value):
    """One tool call a (sub)agent wants to make."""

    tool_name: str
    """Claude Code's tool name, e.g. `Bash`."""
    tool_input: JSONObject
    """The tool's input exactly as the model produced it."""
    tool_use_id: str = ""
    """The model's `tool_use` block id."""


class CallContext(_Value):
    """Who makes the call; passed to hooks as Claude Code does."""

    session_id: str = ""
    """The (sub)agent's session id."""
    agent_id: str | None = None
    """The task id of the subagent (None for the root agent)."""
    agent_type: str | None = None
    """The subagent type, e.g. `general-purpose`."""
    transcript_path: str = ""
    """Host path of the transcript file (may be empty when there is none yet)."""
    cwd: str = WORKSPACE
    """The agent's working directory (a container path)."""
    permission_mode: Mode = "default"
    """The mode the call is decided under."""


class HookOutcome(_Value):
    """What one hook command did; errors are reported here, never raised."""

    hook: str
    """The hook's command line."""
    event: Literal["PreToolUse", "PostToolUse", "PreApply"]
    """The hook event."""
    source: str = ""
    """The settings file that configured the hook."""
    exit_code: int | None = None
    """The exit status; None when it was killed at its timeout."""
    decision: Behavior | None = None
    """The hook's opinion; None for no opinion (or an error)."""
    reason: str = ""
    """`permissionDecisionReason`, or stderr for exit 2."""
    updated_input: JSONObject | None = None
    """A validated replacement tool input."""
    error: str | None = None
    """A non-blocking error: bad exit code, timeout, malformed output."""
    duration_s: float = 0.0
    """Wall time of the hook."""


class Decision(_Value):
    """The host's answer for one tool call. `ask` means: a human (approver) decides."""

    behavior: Behavior
    """allow, deny or ask."""
    reason: str
    """Why, in words a model or a human can act on."""
    rule: str | None = None
    """The rule that decided (`Bash(git diff:*)`), if a rule did."""
    source: str | None = None
    """Where that rule (or mode) came from: `managed:…`, `cli`, `project:…`, `user:…`, `mode`."""
    hook: str | None = None
    """The hook command that decided, if a hook did."""
    updated_input: JSONObject | None = None
    """A hook's replacement input; the tool must run with it instead."""
    hook_outcomes: tuple[HookOutcome, ...] = Field(default_factory=tuple)
    """Every hook that ran, including errors, for the audit trail."""
