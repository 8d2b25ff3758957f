"""What the runner receives from its broker: the task spec (`GET /v1/spec`), the answer
to a permission request and to a delegated `Task`, each decoded and checked.

This module owns the shape of the host's documents as the runner reads them (one
`NamedTuple` each, with its `from_json`); `sandbox_tools.wire` owns the paths, the limits
and the documents the runner sends. The host is trusted, so these checks are a bug guard
rather than a wall: a document of the wrong shape is a `WireFormatError`, never a guess.
Standard library only (it runs inside the sandbox).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypeVar, get_args

from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.wire import (
    DEFAULT_BASH_TIMEOUT_S,
    DEFAULT_CONTEXT_WINDOW_TOKENS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MCP_STARTUP_TIMEOUT_S,
    DEFAULT_MCP_TOOL_TIMEOUT_S,
    EFFORT_LEVELS,
    MAX_MCP_DENIED,
)

T = TypeVar("T")


class WireFormatError(ValueError):
    """A document from the broker does not have the shape this runner expects."""


def _checked(key: str, value: object, kinds: type[T] | tuple[type[T], ...]) -> T:
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise WireFormatError(f"{key}: expected {kinds}, got a boolean")
    if not isinstance(value, kinds):
        raise WireFormatError(f"{key}: expected {kinds}, got {type(value).__name__}")
    return value


def _typed(doc: JSONObject, key: str, kinds: type[T] | tuple[type[T], ...], default: T) -> T:
    return _checked(key, doc.get(key, default), kinds)


def _field(doc: JSONObject, key: str, kinds: type[T] | tuple[type[T], ...]) -> T:
    if key not in doc:
        raise WireFormatError(f"{key}: missing")
    return _checked(key, doc[key], kinds)


class McpServer(NamedTuple):
    """One MCP server a subagent's runner starts (stdio, inside its sandbox) or
    reaches (http/sse, through its egress proxy); the host resolved it from the
    agent file's `mcpServers` and the workspace's trusted `.mcp.json`."""

    name: str
    transport: str = "stdio"
    """`stdio`, `http` or `sse`."""
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    tools: tuple[str, ...] | None = None
    """The `mcp__…` names of its tools this subagent is offered; None: all of them."""
    denied: tuple[str, ...] = ()
    """Patterns (`wire.mcp_name_glob`) of its tools this subagent is not offered (deny
    rules and the agent file's `disallowedTools`)."""

    @classmethod
    def from_json(cls, doc: object) -> McpServer:
        if not isinstance(doc, dict):
            raise WireFormatError("mcp_servers: expected objects")
        args = _typed(doc, "args", list, [])
        env = _typed(doc, "env", dict, {})
        headers = _typed(doc, "headers", dict, {})
        tools = _typed(doc, "tools", (list, type(None)), None)
        denied = _typed(doc, "denied", list, [])[:MAX_MCP_DENIED]
        texts = [*args, *env.values(), *headers.values(), *(tools or []), *denied]
        if not all(isinstance(t, str) for t in texts):
            raise WireFormatError("mcp_servers: args, env, headers and tools hold text")
        return cls(
            name=_field(doc, "name", str),
            transport=_typed(doc, "transport", str, "stdio"),
            command=_typed(doc, "command", str, ""),
            args=tuple(args),
            env=tuple(sorted(env.items())),
            url=_typed(doc, "url", str, ""),
            headers=tuple(sorted(headers.items())),
            tools=None if tools is None else tuple(tools),
            denied=tuple(denied),
        )


class TaskSpec(NamedTuple):
    """The part of the host's `TaskSpec` (served by `GET /v1/spec`) the runner uses;
    the host may send more fields, which the runner ignores. (Named tuples, not
    dataclasses, here and in the tools: `dataclasses` costs the runner's start-up
    about twenty more modules.)"""

    task_id: str
    model: str
    system_prompt: str
    prompt: str
    tools: list[str]
    max_turns: int
    history: tuple[JSONObject, ...] = ()
    """Earlier messages of this session when resuming (already repaired by the host)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    bash_timeout_s: float = DEFAULT_BASH_TIMEOUT_S
    context_window_tokens: int = DEFAULT_CONTEXT_WINDOW_TOKENS
    tool_definitions: tuple[JSONObject, ...] = ()
    """Fork mode: the parent's tool definitions, sent as they are (so the request's
    prefix is the parent's); the tools this runner may run are still `tools`."""
    context_before: tuple[JSONObject, ...] = ()
    """Blocks before the prompt in a new task's first message (CLAUDE.md, date)."""
    context_after: tuple[JSONObject, ...] = ()
    """Blocks after the prompt in a new task's first message (preloaded skills)."""
    skill_listing: str = ""
    """A new task's skill listing: a `system`-role message right after its first
    message (`conversation.with_listing`), as Claude Code sends it; empty: none."""
    environment: bool = False
    """Add the environment details to the system prompt (`sandbox_tools.environment`)."""
    git_status: bool = False
    """Add a git status snapshot of the workspace to the system prompt."""
    mcp_servers: tuple[McpServer, ...] = ()
    """MCP servers to start; their tools are offered as `mcp__<server>__<tool>`."""
    mcp_startup_timeout_s: float = DEFAULT_MCP_STARTUP_TIMEOUT_S
    mcp_tool_timeout_s: float = DEFAULT_MCP_TOOL_TIMEOUT_S
    effort: str | None = None
    """`output_config.effort` of every model call (the agent's `effort`); None: not sent."""
    skills: tuple[JSONObject, ...] = ()
    """Skills the `Skill` tool loads: `name`, `description`, `directory`, `text` (read
    and bounded by the host, from trusted content only)."""

    @classmethod
    def from_json(cls, doc: object) -> TaskSpec:
        if not isinstance(doc, dict):
            raise WireFormatError("the spec is not a JSON object")
        tools = _field(doc, "tools", list)
        history = _typed(doc, "history", list, [])
        if not all(isinstance(t, str) for t in tools):
            raise WireFormatError("tools: expected a list of names")
        if not all(isinstance(m, dict) for m in history):
            raise WireFormatError("history: expected a list of messages")
        return cls(
            task_id=_field(doc, "task_id", str),
            model=_field(doc, "model", str),
            system_prompt=_field(doc, "system_prompt", str),
            prompt=_field(doc, "prompt", str),
            tools=list(tools),
            max_turns=_field(doc, "max_turns", int),
            history=tuple(history),
            max_tokens=_typed(doc, "max_tokens", int, DEFAULT_MAX_TOKENS),
            bash_timeout_s=float(
                _typed(doc, "bash_timeout_s", (int, float), DEFAULT_BASH_TIMEOUT_S)
            ),
            context_window_tokens=_typed(
                doc, "context_window_tokens", int, DEFAULT_CONTEXT_WINDOW_TOKENS
            ),
            tool_definitions=tuple(
                t for t in _typed(doc, "tool_definitions", list, []) if isinstance(t, dict)
            ),
            context_before=tuple(
                b for b in _typed(doc, "context_before", list, []) if isinstance(b, dict)
            ),
            context_after=tuple(
                b for b in _typed(doc, "context_after", list, []) if isinstance(b, dict)
            ),
            skill_listing=_typed(doc, "skill_listing", str, ""),
            environment=_typed(doc, "environment", bool, False),
            git_status=_typed(doc, "git_status", bool, False),
            mcp_servers=tuple(McpServer.from_json(m) for m in _typed(doc, "mcp_servers", list, [])),
            mcp_startup_timeout_s=float(
                _typed(doc, "mcp_startup_timeout_s", (int, float), DEFAULT_MCP_STARTUP_TIMEOUT_S)
            ),
            mcp_tool_timeout_s=float(
                _typed(doc, "mcp_tool_timeout_s", (int, float), DEFAULT_MCP_TOOL_TIMEOUT_S)
            ),
            effort=_effort(_typed(doc, "effort", (str, type(None)), None)),
            skills=tuple(s for s in _typed(doc, "skills", list, []) if isinstance(s, dict)),
        )


def _effort(value: str | None) -> str | None:
    if value is not None and value not in EFFORT_LEVELS:
        raise WireFormatError(f"effort: {value[:20]!r} is not one of {', '.join(EFFORT_LEVELS)}")
    return value


FinalBehavior = Literal["allow", "deny"]
"""The host's answer to a tool call: `orchestrator.behavior.FinalBehavior`, spelt out
again because this contract imports nothing of the host (a unit test holds the two
equal)."""


class PermissionResponse(NamedTuple):
    behavior: FinalBehavior
    reason: str | None = None
    """Why; for a deny, this is what the model is told."""
    updated_input: JSONObject | None = None
    """Replacement tool input (from a hook); use it instead of the original."""

    @classmethod
    def from_json(cls, doc: object) -> PermissionResponse:
        if not isinstance(doc, dict):
            raise WireFormatError("the permission answer is not a JSON object")
        behavior = _field(doc, "behavior", str)
        if behavior not in get_args(FinalBehavior):
            raise WireFormatError(f"behavior: {behavior!r} is neither allow nor deny")
        return cls(
            behavior="allow" if behavior == "allow" else "deny",
            reason=_typed(doc, "reason", (str, type(None)), None),
            updated_input=_typed(doc, "updated_input", (dict, type(None)), None),
        )


class DelegateResponse(NamedTuple):
    text: str
    is_error: bool = False

    @classmethod
    def from_json(cls, doc: object) -> DelegateResponse:
        if not isinstance(doc, dict):
            raise WireFormatError("the task answer is not a JSON object")
        return cls(text=_field(doc, "text", str), is_error=_typed(doc, "is_error", bool, False))
