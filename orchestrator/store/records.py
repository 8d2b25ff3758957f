"""Rows of the state store, their status values, and the size limits the store enforces.

Times are Unix timestamps in seconds (`time.time()`), so ages and orderings are plain
arithmetic and `--json` output stays language-neutral.
"""

from __future__ import annotations

import enum
import json
import time
from typing import Annotated, Literal, TypedDict

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from orchestrator.behavior import Behavior, FinalBehavior
from orchestrator.jsontypes import JSONObject, input_hash

FinishedRunStatus = Literal["completed", "failed", "stopped", "interrupted"]
"""How a run ended (the result document's `status`)."""
RunStatus = Literal["running", FinishedRunStatus]
"""A run's row: running, or how it ended."""


class TaskStatus(enum.StrEnum):
    """Where a task is in its life: the one definition (`runtime.tasks` uses it too)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    NO_OUTPUT = "no_output"
    DISK_LIMIT = "disk_limit"
    """Killed for crossing a disk limit (bytes written, or the free-space floor)."""


RUN_STATUSES: tuple[RunStatus, ...] = (
    "running",
    "completed",
    "failed",
    "interrupted",
    "stopped",
)
TASK_STATUSES: tuple[TaskStatus, ...] = tuple(TaskStatus)
ACTIVE_TASK_STATUSES: frozenset[TaskStatus] = frozenset({TaskStatus.PENDING, TaskStatus.RUNNING})
"""A task in one of these has not ended; after a crash it is what needs recovering."""
TERMINAL_TASK_STATUSES: frozenset[TaskStatus] = frozenset(TASK_STATUSES) - ACTIVE_TASK_STATUSES

MAX_TEXT_CHARS = 1_000_000
"""Longest free text (prompt, result, error, reason, …) kept; longer text is clipped
with a marker that says how much was cut."""
MAX_NAME_CHARS = 200
"""Longest event kind kept (clipped with a marker beyond)."""
MAX_EVENT_DATA_CHARS = 64_000
"""Longest event payload (as JSON); a larger one is replaced by an announced preview."""
MAX_AUDIT_INPUT_CHARS = 64_000
"""Longest tool input (as JSON) kept in an audit record; `input_hash` still covers all
of it, so a clipped record stays bound to the exact input that was decided."""
MAX_TRANSCRIPT_CHARS = 32_000_000
"""Largest transcript checkpoint (as JSON). A transcript is never clipped (resume needs
all of it): a larger one is refused with `TranscriptTooLargeError`."""

TRUNCATED_KEY = "_warden_truncated"
"""Marks a JSON payload the store replaced by a preview because it was too large."""


def clean_text(text: str) -> str:
    """`text` made storable: lone surrogates (valid in JSON, not in UTF-8) become U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def clip_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` cleaned and cut to `limit` characters, announcing the cut."""
    text = clean_text(text)
    if len(text) <= limit:
        return text
    marker = f"\n[… truncated by warden: {len(text) - limit} more characters]"
    return text[: max(0, limit - len(marker))] + marker


def dumps(value: object) -> str:
    """Compact JSON that SQLite can store and that reads back equal (lone surrogates too)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them so they round-trip exactly
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


def bounded_json(value: JSONObject, limit: int) -> str:
    """`value` as JSON, or an announced preview (TRUNCATED_KEY) when over `limit` chars."""
    text = dumps(value)
    if len(text) <= limit:
        return text
    # Escaping inside the wrapper at most doubles the preview (it is JSON text already).
    preview = text[: max(0, limit // 2 - 100)]
    return dumps({TRUNCATED_KEY: True, "original_chars": len(text), "preview": preview})


StoredText = Annotated[str, AfterValidator(clip_text)]
"""Free text, possibly from a container: cleaned and bounded on the way in."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunRecord(_Record):
    """One `warden run` (or `warden resume`) invocation."""

    run_id: str = Field(min_length=1, max_length=200)
    """Unique id of the run."""
    prompt: StoredText
    """The user's prompt to the root agent."""
    workspace: str
    """The workspace directory on the host."""
    model: str
    """The root agent's model."""
    pid: int
    """Process id of the orchestrator that owns the run (for crash recovery)."""
    owner: str | None = None
    """The owning orchestrator's full identity (`orchestrator.owner.Owner` as JSON):
    host, boot id, pid and its start time, state dir; None for runs of older wardens."""
    status: RunStatus = "running"
    """running until `finish_run`."""
    result: StoredText | None = None
    """The root agent's final answer, or None."""
    created_at: float = Field(default_factory=time.time)
    """When the run started."""
    ended_at: float | None = None
    """When the run finished; None while running."""


class TaskRecord(_Record):
    """One subagent task: a node of a run's task tree."""

    task_id: str = Field(pattern=r"^sa_[A-Za-z0-9_-]+$", max_length=200)
    """`sa_` + random."""
    run_id: str = Field(min_length=1, max_length=200)
    """The run this task belongs to."""
    parent_id: str | None = None
    """The delegating task; None when the root agent started it."""
    session_id: str = ""
    """The conversation this task continues; empty on input means a new session whose
    id is the task's own id. A resume is a new task row with an existing session id."""
    agent_type: str = Field(min_length=1, max_length=200)
    """The subagent type, e.g. `general-purpose`."""
    description: StoredText = ""
    """The parent's short description of the task."""
    prompt: StoredText
    """The task prompt."""
    status: TaskStatus = TaskStatus.PENDING
    """Lifecycle state; see ACTIVE_TASK_STATUSES and TERMINAL_TASK_STATUSES."""
    container_id: str | None = None
    """The sandbox container, once created."""
    created_at: float = Field(default_factory=time.time)
    """When the task was created."""
    started_at: float | None = None
    """When its container started."""
    ended_at: float | None = None
    """When it reached a terminal status."""
    result_text: StoredText | None = None
    """The subagent's final answer."""
    error: StoredText | None = None
    """Why it failed, timed out, was stopped or interrupted."""
    depth: int = Field(default=1, ge=0)
    """Nesting depth: a child's depth is its parent's depth + 1 (checked on create)."""
    trace_id: str = ""
    """Shared by every task of one run; empty when not traced."""
    tokens: int = Field(default=0, ge=0)
    """Tokens its model calls used (every usage field the API reports)."""

    @model_validator(mode="before")
    @classmethod
    def _new_session_by_default(cls, data: object) -> object:
        if isinstance(data, dict) and not data.get("session_id"):
            return {**data, "session_id": data.get("task_id", "")}
        return data


class TaskUpdate(TypedDict, total=False):
    """The fields of a task that may change after it is created (`Store.update_task`);
    values are validated like a TaskRecord's."""

    status: str
    container_id: str | None
    started_at: float | None
    ended_at: float | None
    result_text: str | None
    error: str | None
    tokens: int


class EventRecord(_Record):
    """Something that happened during a run, in commit order."""

    event_id: int
    """Monotonic: a reader that saw id N never later sees a new event with id ≤ N."""
    run_id: str
    """The run it belongs to."""
    task_id: str | None
    """The task it concerns; None for the root agent or the run itself."""
    kind: str
    """What happened, e.g. `tool_started`."""
    data: JSONObject
    """Payload; carries TRUNCATED_KEY when the store had to cut it."""
    time: float
    """When it was recorded."""


class AuditRecord(_Record):
    """One permission decision on one tool call."""

    audit_id: int | None = None
    """Assigned by the store; None on input."""
    time: float = Field(default_factory=time.time)
    """When the decision was final."""
    run_id: str
    """The run it happened in."""
    task_id: str | None = None
    """The asking task; None for the root agent."""
    agent_type: str
    """The asking agent's type."""
    tool_name: str = Field(max_length=200)
    """The tool, e.g. `Bash`."""
    tool_use_id: str | None = Field(default=None, max_length=200)
    """The model's tool-use id, when known."""
    input_hash: str = Field(max_length=200)
    """Hash of the exact tool input (approvals are bound to it)."""
    tool_input: JSONObject
    """The tool input; replaced by an announced preview beyond MAX_AUDIT_INPUT_CHARS."""
    decision: Behavior
    """What the policy (rules, hooks, mode) decided."""
    final: FinalBehavior
    """What happened in the end (after an ask was answered)."""
    decided_by: StoredText
    """The rule text, hook command, mode, person or approver that decided."""
    source: StoredText
    """Where that came from: managed policy, CLI, workspace settings, user settings, …"""
    reason: StoredText = ""
    """Why, in words (what a denied model is told)."""
    channel: StoredText = ""
    """For an ask a person (or warden for them) answered: the approval channel that
    answered (`terminal`, `web`, `webhook`, `mcp`, `callback`, `timeout`,
    `non-interactive`, `no approver`); empty when no one was asked."""
    person: StoredText = ""
    """Who answered on that channel: the OS user at the terminal, the name the page or
    the webhook receiver gave (their text: untrusted); `decided_by` is `CHANNEL:PERSON`."""


def audit_record(
    *,
    run_id: str,
    agent_type: str,
    tool_name: str,
    tool_input: JSONObject,
    decision: Behavior,
    final: FinalBehavior,
    decided_by: str,
    source: str,
    reason: str = "",
    task_id: str | None = None,
    tool_use_id: str | None = None,
    channel: str = "",
    person: str = "",
    noted: JSONObject | None = None,
    digest: str | None = None,
) -> AuditRecord:
    """The one way an audit record is made (the gate, broker forwarding, egress, the
    end-of-run report, a refused Task call). Its `input_hash` is
    `jsontypes.input_hash(tool_name, tool_input)`, the hash approvals are bound to
    (`digest`: that same hash, when the caller has made it already); `noted` is
    stored beside the input without being hashed (egress's HTTP method)."""
    return AuditRecord(
        run_id=run_id,
        task_id=task_id,
        agent_type=agent_type,
        tool_name=tool_name,
        tool_use_id=tool_use_id or None,
        input_hash=digest or input_hash(tool_name, tool_input),
        tool_input={**tool_input, **noted} if noted else tool_input,
        decision=decision,
        final=final,
        decided_by=decided_by,
        source=source,
        reason=reason,
        channel=channel,
        person=person,
    )
