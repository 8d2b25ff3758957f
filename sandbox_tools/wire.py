"""The wire contract between a subagent container and its broker on the host.

Both sides import this module, so names and limits cannot drift: the paths,
the limits, and the field names of every document the runner sends (one
TypedDict each, built by the encoders below); what the runner receives (the
spec and the host's answers) is decoded in `sandbox_tools.wire_answers`,
which takes its defaults from here. It is standard library only,
because it runs inside the sandbox, which carries no third-party packages.
The host validates every one of these documents strictly with its own pydantic
models (`orchestrator.broker.wire_models`, closed, size-capped); a unit test
checks that the two agree field by field and that what these encoders build
is accepted there.

Everything travels as JSON over HTTP/1.1 on one Unix socket per subagent,
mounted into the container at `BROKER_SOCKET`.

| method, path            | body                         | answer                          |
|-------------------------|------------------------------|---------------------------------|
| GET  /v1/spec           | -                            | `TaskSpec`                      |
| POST /v1/messages       | Anthropic Messages API       | Anthropic Messages API response |
| POST /v1/permission     | `PermissionRequest` (+events) | `PermissionResponse`           |
| POST /v1/events         | `EventBatch` (or one event)  | `Ack`                           |
| POST /v1/transcript     | `TranscriptCheckpoint`       | `Ack`                           |
| POST /v1/result         | `ResultRequest`              | `Ack`                           |
| POST /v1/task           | `DelegateRequest`            | `DelegateResponse`              |
| GET  /v1/alive          | -                            | `Ack`, only when the broker closes |

Errors use the Anthropic error shape (`error_body`): the broker answers a
refused or failed model call exactly like the Messages API would, and the
runner reads every endpoint's errors the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from sandbox_tools.jsontypes import JSONObject

BROKER_SOCKET_DIR = "/run/warden"
"""Where the broker's socket directory is mounted inside the container."""

BROKER_SOCKET = f"{BROKER_SOCKET_DIR}/broker.sock"
"""The broker socket inside the container."""

WARM_HOLD_SOCKET = f"{BROKER_SOCKET_DIR}/warm.sock"
"""A warm sandbox's runner waits on this socket: the host writes `WARM_GO` once the
broker socket is ready, `WARM_BYE` to dismiss it; the connection dropping means the
orchestrator died."""
WARM_GO = b"go\n"
WARM_BYE = b"bye\n"

ALIVE_PATH = "/v1/alive"
"""Held open by the runner's watchdog; answered (or dropped) when the host side goes."""

BROKER_HOST = "warden-broker"
"""`Host` header of the runner's requests; never resolved (the socket is the address)."""

BROKER_BASE_URL = f"http://{BROKER_HOST}"
"""Base URL for HTTP clients on the socket (host-side tests and benches)."""

WORKSPACE = "/workspace"
"""Where the shared workspace is mounted inside the container."""

IMAGE_ENV_VARIABLE = "WARDEN_IMAGE_ENV"
"""In a project image's sandbox: the image's own environment (`Config.Env`) as a JSON
object. Every one of its keys reaches warden's process (the runner, the seal shim)
empty, so the image's `LD_PRELOAD`, `LD_LIBRARY_PATH`, `PYTHON*`, `BASH_ENV` ... never
act on warden's loader or interpreter; once sealed, warden's process puts the values
back for the commands it runs (`sandbox_tools.image_env`)."""

ANTHROPIC_VERSION = "2023-06-01"
"""`anthropic-version` header the runner sends on model calls."""

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body the broker reads on any endpoint."""
MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects the broker accepts in a request body (the
Messages API's own documents nest a few levels; a tool input a few more)."""

MAX_TOOL_INPUT_BYTES = 256 * 1024
"""Largest tool input (as JSON) a permission request may carry."""

MAX_EVENT_DETAIL_CHARS = 2_000
"""Longest free text in one event."""

MAX_EVENTS_PER_BATCH = 50
"""Most events one `POST /v1/events` (or one permission request) may carry."""

MAX_RESULT_CHARS = 200_000
"""Longest final answer a subagent may return."""

MAX_TOOL_USE_ID_CHARS = 200
MAX_TOOL_NAME_CHARS = 100

DEFAULT_MODEL_MAX_RETRIES = 8
"""Retries of one model call on 429/5xx/529 (9 attempts in all); the host SDK's retries."""

DEFAULT_MODEL_RETRY_TOTAL_S = 300.0
"""Longest one model call keeps retrying on the host, counted from its first attempt."""

DEFAULT_MAX_TOKENS = 8192
"""`max_tokens` of each model call when the spec does not say."""
MAX_SKILLS = 100
"""Most skills one subagent's `Skill` tool is offered."""
MAX_SKILL_CHARS = 70_000
"""Longest skill text in a spec (the host reads at most 64 KiB of a SKILL.md)."""
MAX_SKILL_DESCRIPTION_CHARS = 1536
"""Longest skill description listed to the model (Claude Code's cut of its
`description - when_to_use`)."""
MAX_SKILL_LISTING_CHARS = MAX_SKILLS * (MAX_SKILL_DESCRIPTION_CHARS + 200) + 200
"""Longest skill listing in a spec (every skill listed at its longest)."""
EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")
"""The Messages API's `output_config.effort` levels (what an agent's `effort` may send)."""
DEFAULT_CONTEXT_WINDOW_TOKENS = 200_000
"""The model's context window when the spec does not say (the Claude models' standard)."""

DEFAULT_BASH_TIMEOUT_S = 120.0
"""Timeout of a Bash call that gives none, when the spec does not say."""

TOOL_NAMES = (
    "Bash",
    "Read",
    "Write",
    "Edit",
    "Glob",
    "Grep",
    "TaskOutput",
    "TaskStop",
    "NotebookEdit",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Skill",
)
"""Tools that run inside the container, with Claude Code's names (`TaskOutput` and
`TaskStop` read and stop the background shells `Bash` starts; `WebFetch` goes out
through the sandbox's egress and makes one model call through the broker;
`WebSearch` is one model call with the API's web search server tool; `Skill` loads
one of the skills the host put in the spec)."""

DELEGATION_TOOL_NAMES = ("Task",)
"""Tools that a container asks the host to carry out (nesting)."""

MCP_PREFIX = "mcp__"
"""MCP tools are offered as `mcp__<server>__<tool>` (Claude Code's names)."""
MAX_MCP_SERVERS = 16
"""Most MCP servers one subagent may start."""
MAX_MCP_TOOLS = 128
"""Most MCP tools (over all its servers) one subagent is offered; the rest are named
in a warning."""
MAX_MCP_RESULT_CHARS = 50_000
"""Longest MCP tool result the model sees (cut with an announcement)."""
MCP_RESOURCE_TOOL_NAMES = ("ListMcpResourcesTool", "ReadMcpResourceTool")
"""Claude Code's tools over its MCP servers' resources (`resources/list`,
`resources/read`). A subagent that lists them, or inherits every tool, has them in
its spec's `tools` when it has MCP servers; the runner offers them only when a
started server declares the `resources` capability (`tools.mcp_resources`)."""
MAX_MCP_RESOURCE_RESULT_CHARS = 100_000
"""Longest ListMcpResourcesTool or ReadMcpResourceTool result the model sees (the
pinned Claude Code's limit for both): a read's texts are cut to fit, each cut
announced inside its text, so the result stays one JSON document."""
MCP_RESOURCE_BLOB_DIR = "/tmp/warden-mcp-resources"
"""Where ReadMcpResourceTool saves a binary resource inside the sandbox (its `/tmp`
tmpfs: bounded by the sandbox's tmp size, gone with the sandbox, never the
workspace); the model is given the path, never the bytes."""
DEFAULT_MCP_STARTUP_TIMEOUT_S = 30.0
"""How long a stdio MCP server may take to start and answer `initialize` and
`tools/list` before it counts as failed (`WARDEN_MCP_TIMEOUT_S`)."""
DEFAULT_MCP_TOOL_TIMEOUT_S = 300.0
"""How long one MCP tool call may take (`WARDEN_MCP_TOOL_TIMEOUT_S`)."""

_MCP_NAME_UNSAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def mcp_part(name: str) -> str:
    """A server or tool name as it appears in an `mcp__…` tool name: every character
    but letters, digits, `_` and `-` becomes `_` (as Claude Code spells them)."""
    return "".join(c if c in _MCP_NAME_UNSAFE else "_" for c in name)


def mcp_tool_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, both parts made safe (`mcp_part`)."""
    return f"{MCP_PREFIX}{mcp_part(server)}__{mcp_part(tool)}"


MAX_MCP_DENIED = 256
"""Most removed-tool patterns (`McpServer.denied`) one server's entry carries."""


def mcp_name_glob(pattern: str, name: str) -> bool:
    """Whether an `mcp__…` tool name matches a pattern in which `*` stands for any
    text (how the pinned Claude Code takes deny rules when it removes MCP tools from
    what the model is offered: `mcp__x*` removes the tools of `x` and `xy`)."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    if not (name.startswith(parts[0]) and name.endswith(parts[-1])):
        return False
    at, end = len(parts[0]), len(name) - len(parts[-1])
    if end < at:
        return False
    for middle in parts[1:-1]:
        found = name.find(middle, at, end)
        if found < 0:
            return False
        at = found + len(middle)
    return True


def mcp_tool_offered(
    name: str, servers: Sequence[tuple[str, Sequence[str] | None, Sequence[str]]]
) -> bool:
    """Whether `name` is a tool one of `servers` ((name, its offered tools or None for
    all, the patterns of its removed tools)) may offer: `mcp__<server>__<tool>` of a
    server in the list, in its tools when the server names them, and not removed. The
    host refuses a permission request for any other `mcp__` name."""
    for server, tools, denied in servers:
        prefix = f"{MCP_PREFIX}{mcp_part(server)}__"
        if name.startswith(prefix) and len(name) > len(prefix):
            if any(mcp_name_glob(p, name) for p in denied):
                return False
            return tools is None or name in tools
    return False


EventKind = Literal["tool_started", "tool_finished", "turn_finished", "log", "model_text"]
EVENT_KINDS: tuple[EventKind, ...] = (
    "tool_started",
    "tool_finished",
    "turn_finished",
    "log",
    "model_text",
)
"""`model_text` is the model's text as it streams, reported by the broker (the runner
sends the others)."""
ResultStatus = Literal["completed", "failed"]

# -- what the runner sends (field names: the host's models must match) ----------


class PermissionRequest(TypedDict):
    """Asked before every tool call; the answer may take as long as a human does.
    `events`: progress the runner held since its last request (the previous calls'
    starts and ends), recorded by the host, in order, before it decides this call."""

    tool_use_id: str
    tool_name: str
    tool_input: JSONObject
    events: list[EventRequest]


class EventRequest(TypedDict):
    """Progress the runner reports; shown live and written to the run's events."""

    kind: EventKind
    tool_name: str | None
    tool_use_id: str | None
    detail: str
    is_error: bool


class EventBatch(TypedDict):
    """Events in the order they happened (the runner sends them in the background)."""

    events: list[EventRequest]


class TranscriptCheckpoint(TypedDict):
    """The whole conversation so far; sent after every turn."""

    messages: list[JSONObject]
    turn: int


class ResultRequest(TypedDict):
    """The runner's last word."""

    status: ResultStatus
    text: str
    error: str | None


class DelegateRequest(TypedDict):
    """A nested `Task` call, carried out by the host."""

    tool_use_id: str
    input: JSONObject


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a note saying so."""
    if len(text) <= limit:
        return text
    note = f"\n[truncated to {limit} characters]"
    return text[: max(0, limit - len(note))] + note


def permission_request(
    tool_use_id: str,
    tool_name: str,
    tool_input: JSONObject,
    events: list[EventRequest] | None = None,
) -> PermissionRequest:
    return {
        "tool_use_id": tool_use_id,
        "tool_name": tool_name,
        "tool_input": tool_input,
        "events": events or [],
    }


def event_request(
    kind: EventKind,
    tool_name: str | None = None,
    tool_use_id: str | None = None,
    detail: str = "",
    is_error: bool = False,
) -> EventRequest:
    """An event within the wire's limits (the detail is clipped, not refused)."""
    return {
        "kind": kind,
        "tool_name": tool_name[:MAX_TOOL_NAME_CHARS] if tool_name is not None else None,
        "tool_use_id": tool_use_id[:MAX_TOOL_USE_ID_CHARS] if tool_use_id is not None else None,
        "detail": clip(detail, MAX_EVENT_DETAIL_CHARS),
        "is_error": is_error,
    }


def event_batch(events: list[EventRequest]) -> EventBatch:
    return {"events": events}


def transcript_checkpoint(messages: list[JSONObject], turn: int) -> TranscriptCheckpoint:
    return {"messages": messages, "turn": turn}


def result_request(status: ResultStatus, text: str = "", error: str | None = None) -> ResultRequest:
    """A result within the wire's limits (text and error are clipped, not refused)."""
    return {
        "status": status,
        "text": clip(text, MAX_RESULT_CHARS),
        "error": clip(error, MAX_EVENT_DETAIL_CHARS) if error is not None else None,
    }


def delegate_request(tool_use_id: str, task_input: JSONObject) -> DelegateRequest:
    return {"tool_use_id": tool_use_id, "input": task_input}


def error_body(kind: str, message: str) -> JSONObject:
    """Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`,
    which every broker endpoint uses for refusals."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_message(doc: object) -> str | None:
    """The message of an Anthropic-shaped error body; None if `doc` is not one."""
    if not isinstance(doc, dict) or doc.get("type") != "error":
        return None
    error = doc.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        message: str = error["message"]
        return message
    return None
