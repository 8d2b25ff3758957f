"""The wire contract between a subagent container and its broker on the host.

Both sides import this module, so client and server cannot drift. Everything
here travels as JSON over HTTP/1.1 on one Unix socket per subagent, mounted
into the container at `BROKER_SOCKET`.

Endpoints (all paths relative to the socket):

| method, path            | body                   | answer                          |
|-------------------------|------------------------|---------------------------------|
| GET  /v1/spec           | -                      | `TaskSpec`                      |
| POST /v1/messages       | Anthropic Messages API | Anthropic Messages API response |
| POST /v1/permission     | `PermissionRequest`    | `PermissionResponse`            |
| POST /v1/events         | `EventRequest`         | `Ack`                           |
| POST /v1/transcript     | `TranscriptCheckpoint` | `Ack`                           |
| POST /v1/result         | `ResultRequest`        | `Ack`                           |
| POST /v1/task           | `DelegateRequest`      | `DelegateResponse`              |
| GET  /v1/alive          | -                      | `Ack`, only when the broker closes |

Errors use the Anthropic error shape (`ErrorBody`), so the anthropic SDK in
the container parses a refused model call like any other API error.

The host treats every byte that arrives here as untrusted: bodies are size
capped before parsing and validated by these models, which forbid unknown
fields.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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

BROKER_BASE_URL = "http://warden-broker"
"""Base URL the in-container clients use; the host name is never resolved."""

WORKSPACE = "/workspace"
"""Where the shared workspace is mounted inside the container."""

PLACEHOLDER_API_KEY = "warden-broker-adds-the-real-key"
"""What the in-container anthropic client sends as its key; the broker drops it."""

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body the broker reads on any endpoint."""

MAX_TOOL_INPUT_BYTES = 256 * 1024
"""Largest tool input (as JSON) a permission request may carry."""

MAX_EVENT_DETAIL_CHARS = 2_000
"""Longest free text in one event."""

MAX_RESULT_CHARS = 200_000
"""Longest final answer a subagent may return."""

DEFAULT_MODEL_MAX_RETRIES = 8
"""Retries of one model call on 429/5xx/529 (9 attempts in all); the SDK's retry layer."""

DEFAULT_MODEL_RETRY_TOTAL_S = 300.0
"""Longest one model call keeps retrying, counted from its first attempt."""

TOOL_NAMES = ("Bash", "Read", "Write", "Edit", "Glob", "Grep")
"""Tools that run inside the container, with Claude Code's names."""

DELEGATION_TOOL_NAMES = ("Task",)
"""Tools that a container asks the host to carry out (nesting)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSpec(_Wire):
    """What a runner needs to start its loop; served by `GET /v1/spec`."""

    task_id: str
    """The task's id (`sa_…`)."""
    parent_id: str | None = None
    """The delegating task's id; None when the parent is the root agent."""
    trace_id: str
    """Shared by every task of one run; sent back on events."""
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
    history: list[dict[str, Any]] = Field(default_factory=list)
    """Earlier messages of this session when resuming; empty for a new task."""
    tools: list[str]
    """Tool names this subagent may use (a subset of TOOL_NAMES + DELEGATION_TOOL_NAMES)."""
    max_turns: int = Field(ge=1)
    """Model calls allowed; the broker refuses the one past it."""
    max_tokens: int = Field(default=8192, ge=1)
    """`max_tokens` for each model call."""
    bash_timeout_s: float = Field(default=120.0, gt=0)
    """Default timeout of one Bash tool call."""
    model_max_retries: int = Field(default=DEFAULT_MODEL_MAX_RETRIES, ge=0, le=100)
    """Retries of one model call on 429/5xx/529 (the SDK's retry layer)."""
    model_retry_total_s: float = Field(default=DEFAULT_MODEL_RETRY_TOTAL_S, gt=0)
    """Longest one model call keeps retrying, from its first attempt."""


class PermissionRequest(_Wire):
    """Asked before every tool call; the answer may take as long as a human does."""

    tool_use_id: str = Field(max_length=200)
    tool_name: str = Field(max_length=100)
    tool_input: dict[str, Any]


class PermissionResponse(_Wire):
    behavior: Literal["allow", "deny"]
    reason: str | None = None
    """Why; for a deny, this is what the model is told."""
    updated_input: dict[str, Any] | None = None
    """Replacement tool input (from a hook); use it instead of the original."""


EventKind = Literal["tool_started", "tool_finished", "turn_finished", "log"]


class EventRequest(_Wire):
    """Progress the runner reports; shown live and written to the run's events."""

    kind: EventKind
    tool_name: str | None = Field(default=None, max_length=100)
    tool_use_id: str | None = Field(default=None, max_length=200)
    detail: str = Field(default="", max_length=MAX_EVENT_DETAIL_CHARS)
    is_error: bool = False


class TranscriptCheckpoint(_Wire):
    """The whole conversation so far; sent after every turn."""

    messages: list[dict[str, Any]]
    turn: int = Field(ge=0)


class ResultRequest(_Wire):
    """The runner's last word."""

    status: Literal["completed", "failed"]
    text: str = Field(default="", max_length=MAX_RESULT_CHARS)
    """The final assistant text (empty when the model returned none)."""
    error: str | None = Field(default=None, max_length=MAX_EVENT_DETAIL_CHARS)


class DelegateRequest(_Wire):
    """A nested `Task` call, carried out by the host."""

    tool_use_id: str = Field(max_length=200)
    input: dict[str, Any]


class DelegateResponse(_Wire):
    text: str
    is_error: bool = False


class Ack(_Wire):
    ok: bool = True


class ErrorDetail(_Wire):
    type: str
    message: str


class ErrorBody(_Wire):
    """Anthropic's error shape: `{"type": "error", "error": {...}}`."""

    type: Literal["error"] = "error"
    error: ErrorDetail


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error payload in the shape every endpoint uses."""
    return ErrorBody(error=ErrorDetail(type=kind, message=message)).model_dump()
