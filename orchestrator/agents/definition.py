"""What a subagent type is (`AgentDefinition`): its prompt, tools, model and
limits, with the names and bounds an agent file is checked against, and how
listed tool names are sorted into the ones warden runs and the ones it drops.
Shared by the registry (`registry`) and the file reader (`files`).
"""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.agents.keys import McpServerSpec, MemoryScope
from orchestrator.permissions.hooks import HookCommand
from orchestrator.permissions.models import Mode
from orchestrator.permissions.rules import TOOL_ALIASES
from sandbox_tools.wire import (
    DELEGATION_TOOL_NAMES,
    MCP_PREFIX,
    MCP_RESOURCE_TOOL_NAMES,
    TOOL_NAMES,
    mcp_part,
)

BUILTIN_SOURCE = "built-in"
IMAGE_AGENT = "agent"
"""The general-purpose image (`Dockerfile.agent`)."""
IMAGE_BASH = "bash"
"""The restricted bash image (`images/bash/`)."""

DEFAULT_MAX_TURNS = 50
DEFAULT_TIMEOUT_S = 900.0
MIN_MEMORY_BYTES = 6 * 1024 * 1024
"""Docker refuses a memory limit below 6 MiB; a limit must be above it (the sandbox's
own bound, `backend.contract.ResourceLimits`)."""
MIN_PIDS = 8
"""The sandbox's floor for a process limit (`backend.contract.ResourceLimits`): fewer
cannot start its runner. Checked when the agent file is read, not when a task starts."""


VALID_TOOLS = (*TOOL_NAMES, *DELEGATION_TOOL_NAMES, *MCP_RESOURCE_TOOL_NAMES)
"""Tool names an agent may list and keep."""

_MCP_DIR = (
    "it lists directory resources with `resources/directory/read` of the draft MCP skills "
    "extension, which warden's runner does not speak (ListMcpResourcesTool and "
    "ReadMcpResourceTool are run)"
)
_TEAM = (
    "an agent-team tool: warden's subagents are one-shot tasks, with no message channel "
    "into a running one and no shared task list"
)
_OLD = "an older Claude Code tool; its work is done by the current ones"
_HOST = "needs Claude Code's own runtime or a person at its terminal"

UNSUPPORTED_TOOLS: dict[str, str] = {
    "ReadMcpResourceDirTool": _MCP_DIR,
    "SendMessage": _TEAM,
    "TaskCreate": _TEAM,
    "TaskGet": _TEAM,
    "TaskList": _TEAM,
    "TaskUpdate": _TEAM,
    "LS": _OLD,
    "MultiEdit": _OLD,
    "NotebookRead": _OLD,
    "TodoRead": _OLD,
    "AskUserQuestion": _HOST,
    "EnterPlanMode": _HOST,
    "ExitPlanMode": _HOST,
    "LSP": _HOST,
    "SlashCommand": _HOST,
}
"""Claude Code tools warden does not run in a container, each with the short reason
its warning gives; `UNSUPPORTED_TOOLS_DOC` lists each with the full reason."""

CLAUDE_CODE_ONLY_TOOLS = frozenset(UNSUPPORTED_TOOLS)
"""Their names: dropped with a warning naming `UNSUPPORTED_TOOLS_DOC`."""

UNSUPPORTED_TOOLS_DOC = "docs/tools.md"
"""The one page listing the Claude Code tools warden does not run, and why."""

MCP_INHERITING_BUILTINS = frozenset({"general-purpose", "Explore", "Plan"})
"""Built-in types whose subagents get the project's MCP servers (`inherits_mcp`)."""
ALL_MCP_TOOLS = "mcp__*"
"""In a tool list: every MCP tool (of the servers the subagent's spec names)."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class AgentDefinition(BaseModel):
    """One subagent type: what the model is told, which tools it gets, its limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    """The `subagent_type` the parent passes to `Task`, e.g. `code-reviewer`."""
    description: str = Field(min_length=1)
    """When to use this agent; shown to the parent model."""
    system_prompt: str = Field(min_length=1)
    """The subagent's system prompt (the file's body)."""
    tools: tuple[str, ...] | None = None
    """Tool names (from `VALID_TOOLS`); None means every tool the runner has; empty
    means none (the agent can only answer from its prompt)."""
    model: str | None = None
    """Model id; None (`inherit` in a file) means the parent's model."""
    model_alias: str | None = None
    """The alias the file named (`sonnet`, …) when `model` was resolved from one."""
    permission_mode: Mode | None = None
    """`permissionMode` from the file: it can only narrow the parent's mode."""
    hooks: tuple[HookCommand, ...] = ()
    """`hooks` from the file: PreToolUse/PostToolUse hooks for this agent's calls only."""
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1)
    """Most model calls the subagent may make."""
    image: str | None = Field(default=None, min_length=1, pattern=r"^\S+$")
    """`agent`, `bash`, or the name of a local image; None: not set, so the run's
    choice applies (`--image`, the dev container, else `agent`; see `agents.images`)."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    """Wall-clock deadline; the container is killed when it passes."""
    memory_limit: int | None = Field(default=None, gt=MIN_MEMORY_BYTES)
    """RAM limit in bytes (`warden.memory`); None keeps the backend's default."""
    cpus: float | None = Field(default=None, gt=0)
    """CPU limit; None keeps the backend's default."""
    pids: int | None = Field(default=None, ge=MIN_PIDS)
    """Process limit; None keeps the backend's default."""
    token_budget: int | None = Field(default=None, ge=1)
    """Tokens (every usage field) one subagent of this type may spend; checked by
    the broker before each model call. The run's `--token-budget` caps it."""
    disk_write_limit: int | None = Field(default=None, ge=1)
    """Most bytes its sandbox may write; lowers the run's cap (never raises it)."""
    fork: bool = False
    """Start subagents of this type in fork mode (from the parent's conversation)
    unless a Task call says `fork: false`; needs a run with fork mode on."""
    network: object = None
    """`warden.network` as written (None: not set; see `egress.sources.agent_rules`)."""
    memory_scope: MemoryScope | None = None
    """Claude Code's `memory`: where the agent's memory directory lives (user:
    the user's `agent-memory/NAME/`, project: `.claude/agent-memory/NAME/`, local:
    `.claude/agent-memory-local/NAME/`); its MEMORY.md goes into the prompt."""
    skills: tuple[str, ...] = ()
    """Skills preloaded into its first message (`.claude/skills/NAME/SKILL.md`)."""
    effort: str | None = None
    """Claude Code's `effort` (low, medium, high, xhigh, max, or a number as text)."""
    initial_prompt: str | None = None
    """`initialPrompt`: Claude Code reads it only for a main-session agent, never for a
    subagent; kept and shown, not sent."""
    omit_claude_md: bool = False
    """`omitClaudeMd`. Leaves the CLAUDE.md files out of a built-in's context
    (Explore, Plan); an agent file's is kept and shown but, as in the pinned Claude
    Code, its subagents still get the files."""
    background: bool = False
    """`background`: a Task call that does not say `run_in_background` runs in the
    background."""
    isolation: str | None = None
    """`isolation: worktree`: the subagent works in its own working copy, and its
    changes reach the workspace only through a reviewed apply (`orchestrator.apply`)."""
    mcp_servers: tuple[McpServerSpec, ...] = ()
    """`mcpServers`: MCP servers started for this agent's subagents, inside their
    sandboxes (`agents.mcp`)."""
    mcp_tools: tuple[str, ...] = ()
    """`mcp__…` names its `tools` list (`mcp__server`, `mcp__server__*`,
    `mcp__server__tool`): the MCP tools it is offered (`agents.mcp.servers_for`)."""
    mcp_denied: tuple[str, ...] = ()
    """The MCP tools its `disallowedTools` removes, as `wire.mcp_name_glob` patterns
    (`mcp__*` every one, `mcp__server__*` a whole server, `mcp__server__tool` one)."""
    inherits_tools: bool = False
    """Its file lists `disallowedTools` but no `tools`: as in Claude Code it still
    inherits the session's MCP servers (less what `disallowedTools` removes)."""
    color: str | None = None
    """`color`: shown by `warden agents list/show`."""
    omit_git_status: bool = False
    """Its context leaves out the git status snapshot (the built-in Explore and Plan)."""
    source: str = BUILTIN_SOURCE
    """The file it came from, or `built-in`."""
    extra: dict[str, object] = Field(default_factory=dict)
    """Frontmatter keys warden does not know, kept as written."""
    dropped_tools: tuple[str, ...] = ()
    """Listed tools warden does not run in a container (`SendMessage`, …)."""

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if tools is None:
            return None
        unknown = [tool for tool in tools if tool not in VALID_TOOLS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; valid tools: {', '.join(VALID_TOOLS)}")
        return tuple(dict.fromkeys(tools))

    @property
    def inherits_mcp(self) -> bool:
        """Whether its subagents get every MCP server of the project, as Claude Code's
        do when they inherit the session's tools: a file that lists no `tools`, and
        the built-ins whose Claude Code counterparts take every tool."""
        return (
            self.tools is None
            or self.inherits_tools
            or (self.source == BUILTIN_SOURCE and self.name in MCP_INHERITING_BUILTINS)
        )

    def policy_tools(self) -> tuple[str, ...] | None:
        """The tools its permission policy lets it call (None: it lists none, so it
        keeps its parent's): the listed ones, its listed MCP tools, every tool of
        the servers its file defines or names (`mcpServers`), and of every server
        when it inherits them (`ALL_MCP_TOOLS`)."""
        if self.tools is None:
            return None
        servers = tuple(f"mcp__{mcp_part(s.name)}" for s in self.mcp_servers)
        every = (ALL_MCP_TOOLS, *MCP_RESOURCE_TOOL_NAMES) if self.inherits_mcp else ()
        return tuple(dict.fromkeys((*self.tools, *self.mcp_tools, *servers, *every)))

    def offered_tools(self, *, may_delegate: bool) -> list[str]:
        """The tools a task of this type is given: its listed ones (all sandbox tools
        when it lists none), the MCP resource tools when it inherits the project's MCP
        servers (the spec keeps them only when it has servers: `briefing`), with Task
        only where the run's depth still allows nesting (`may_delegate`) and the type
        does not exclude it."""
        listed = TOOL_NAMES if self.tools is None else self.tools
        tools = [t for t in listed if t not in DELEGATION_TOOL_NAMES]
        if self.inherits_mcp:  # as Claude Code: with the servers' tools come these two
            tools.extend(t for t in MCP_RESOURCE_TOOL_NAMES if t not in tools)
        if may_delegate and (self.tools is None or "Task" in self.tools):
            tools.extend(DELEGATION_TOOL_NAMES)
        return tools


MCP_TOOL_PATTERN = r"^mcp__[A-Za-z0-9_-]+?(__([A-Za-z0-9_-]+|\*))?$"
"""An MCP tool in a `tools:` list: `mcp__server`, `mcp__server__*`, `mcp__server__tool`."""


DISALLOWED_MCP_PATTERN = r"^mcp__(\*|[A-Za-z0-9_-]+?(__([A-Za-z0-9_-]+|\*))?)$"
"""The MCP forms the pinned Claude Code honours in an agent's `disallowedTools`:
`mcp__*`, `mcp__server`, `mcp__server__*`, `mcp__server__tool` (measured: it ignores
`mcp__server__p*`)."""


def disallowed_mcp(denied: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """An agent's `disallowedTools` MCP names as removed-tool patterns
    (`wire.mcp_name_glob`), and the names it ignores, as Claude Code does."""
    patterns: list[str] = []
    ignored: list[str] = []
    for name in denied:
        if not name.startswith(MCP_PREFIX):
            continue
        if not re.match(DISALLOWED_MCP_PATTERN, name):
            ignored.append(name)
            continue
        rest = name[len(MCP_PREFIX) :]
        patterns.append(name if "__" in rest or rest == "*" else f"{name}__*")
    return tuple(dict.fromkeys(patterns)), ignored


def split_tool_names(tools: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Split listed tools into the ones warden runs (`mcp__…` names among them) and
    (dropped tool, why) pairs."""
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for listed in tools:
        tool = TOOL_ALIASES.get(listed, listed)
        if (
            tool.startswith(MCP_PREFIX) and re.match(MCP_TOOL_PATTERN, tool)
        ) or tool in VALID_TOOLS:
            kept.append(tool)
        elif tool in CLAUDE_CODE_ONLY_TOOLS:
            why = UNSUPPORTED_TOOLS[tool]
            dropped.append(
                (tool, f"a Claude Code tool warden does not run: {why} ({UNSUPPORTED_TOOLS_DOC})")
            )
        elif "(" in tool:
            dropped.append(
                (
                    tool,
                    "a permission rule, not a tool name; list the bare tool and put the "
                    "rule in .claude/settings.json `permissions`",
                )
            )
        else:
            close = difflib.get_close_matches(tool, [*VALID_TOOLS, *CLAUDE_CODE_ONLY_TOOLS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            dropped.append((tool, f"an unknown tool{hint}; warden runs {', '.join(VALID_TOOLS)}"))
    return kept, dropped
