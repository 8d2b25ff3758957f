"""The documents warden publishes, as closed pydantic models: one event shape (in
`events.jsonl`, `warden run --json`, `warden logs --json` and `logs --follow --json`)
and one result document (the last line of `warden run --json`).

Their JSON Schemas are generated from these models (`warden schema events|result`);
`docs/schema/` holds a copy that a test keeps equal to the generated one. A change
that breaks readers bumps SCHEMA_VERSION.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.exit_codes import Outcome
from orchestrator.jsontypes import JSONObject
from orchestrator.schema_docs import documented
from orchestrator.store.records import FinishedRunStatus

SCHEMA_VERSION = 1
"""Version of the event and result documents; bumped on a change that breaks readers."""

TASK_END_KINDS = (
    "task_completed",
    "task_failed",
    "task_timed_out",
    "task_stopped",
    "task_interrupted",
)
"""The kinds that end a task (its final status is in `data.status`)."""
TASK_EVENT_KINDS = ("task_started", "task_running", *TASK_END_KINDS)
"""The kinds of a task's own life."""
EVENT_KINDS = (
    *TASK_EVENT_KINDS,
    "permission_denied",
    "approval_requested",
    "approval_answered",
    "permission_rule_added",
    "permission_rule_failed",
    "hook_error",
    "post_tool_use_hook",
    "broker_rejected",
    "broker_notice",
    "disk_meter_gap",
    "sandbox_guard_weakened",
    "egress_denied",
    "egress_summary",
    "task_stop_requested",
    "task_refused",
    "todos_updated",
    "task_warning",
    "apply_decided",
)
"""The kinds warden emits today. Readers should ignore kinds they do not know."""


class Event(BaseModel):
    """One event of a run. Every string field may hold text that came from a
    container: treat it as data, never as markup or commands."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=documented)

    ts: float = Field(default_factory=time.time)
    """When it happened (Unix time, seconds)."""
    kind: str
    """What happened; see EVENT_KINDS (`task_running` carries the subagent's own
    `tool_started`/`tool_finished` in `data.event`)."""
    run_id: str
    """The run it belongs to."""
    task_id: str | None = None
    """The subagent task it concerns; null for the parent agent or the run."""
    parent_id: str | None = None
    """The task that started that task; null when the parent agent did."""
    agent_type: str | None = None
    """The subagent type."""
    trace_id: str | None = None
    """Shared by every event of one run (W3C trace id when tracing is on)."""
    data: JSONObject = Field(default_factory=dict)
    """Kind-specific payload (e.g. tool_name, status, duration_s, tokens, reason)."""


RunStatus = FinishedRunStatus
"""How the run ended (`store.records.FinishedRunStatus`: the store's, without `running`)."""


class Denial(BaseModel):
    """A tool call that was not allowed to run."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    task_id: str | None
    """The asking task."""
    tool_name: str
    """The tool, e.g. `Bash`."""
    input_hash: str
    """Hash of the exact tool input (see `warden audit`)."""
    decided_by: str
    """The rule, hook, mode, person or approver that denied it."""
    reason: str
    """Why, in words."""


class EgressUse(BaseModel):
    """One destination a task's sandbox asked its egress proxy for."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    host: str
    """The host name (or IP literal) asked for; from the container: data only."""
    port: int
    """The TCP port."""
    connections: int
    """Connections allowed."""
    refused: int
    """Connections refused (rule, mode, approver, address or SNI check)."""
    bytes_up: int = 0
    """Bytes sent to it through the proxy."""
    bytes_down: int = 0
    """Bytes received from it through the proxy."""


class TokenUsage(BaseModel):
    """Tokens by the API's usage fields, which are billed at different rates (cache
    writes 1.25x the input price for 5 minutes, 2x for an hour; cache reads 0.1x)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    input_tokens: int = 0
    """Input tokens read neither from nor into the prompt cache."""
    cache_creation_input_tokens: int = 0
    """Input tokens written to the prompt cache."""
    cache_read_input_tokens: int = 0
    """Input tokens read from the prompt cache."""
    output_tokens: int = 0
    """Tokens the model generated."""
    cache_hit_share: float | None = None
    """cache_read_input_tokens / all input tokens (0..1); null when there was no input."""

    @classmethod
    def of(cls, counts: object) -> TokenUsage:
        """From a `{field: count}` object (missing or malformed counts are 0)."""
        values = counts if isinstance(counts, dict) else {}
        fields = {
            name: value
            for name in USAGE_COUNT_FIELDS
            if isinstance(value := values.get(name), int)
            and not isinstance(value, bool)
            and value > 0
        }
        return cls(**fields).with_share()

    def with_share(self) -> TokenUsage:
        total = self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
        share = round(self.cache_read_input_tokens / total, 4) if total else None
        return self.model_copy(update={"cache_hit_share": share})

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            **{name: getattr(self, name) + getattr(other, name) for name in USAGE_COUNT_FIELDS}
        ).with_share()


USAGE_COUNT_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


class TaskSummary(BaseModel):
    """One subagent task of the run; `parent_id` makes the list a tree."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    task_id: str
    """`sa_` + random."""
    parent_id: str | None
    """The task that started it; null when the parent agent did."""
    depth: int
    """1 for a task the parent agent started, 2 for its children, and so on."""
    agent_type: str
    """The subagent type."""
    description: str
    """The parent's short description of the task."""
    status: str
    """completed, no_output, failed, timed_out, stopped, interrupted (or still pending /
    running when the run was cut short)."""
    duration_s: float | None
    """Wall time from creation to end; null when it never ended."""
    tokens: int
    """Tokens over its model calls (every usage field: input, cache writes, cache reads,
    output)."""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    """The same tokens by usage field, with the share read from the prompt cache."""
    turns: int
    """Model calls it made."""
    tool_calls: int
    """Tool calls it started."""
    denials: int
    """Tool calls that were denied."""
    asks: int
    """Tool calls that needed a person's (or the non-interactive approver's) answer."""
    files_written: list[str]
    """Paths of allowed Write/Edit/NotebookEdit calls (Bash writes are in files_changed)."""
    files_changed: list[str] = Field(default_factory=list)
    """Workspace paths created, modified or deleted while the task ran, by any means
    (Bash included), from snapshots of the workspace before and after it; at most 200."""
    files_changed_count: int = 0
    """All such paths, listed or not."""
    files_attribution: Literal["sole", "shared", "unknown"] = "unknown"
    """`sole`: no other task ran meanwhile, so every change is this task's; `shared`:
    another task ran at the same time and its changes may be listed too; `unknown`:
    not measured (the task never ran, or an older warden recorded it)."""
    files_scan_truncated: bool = False
    """A workspace snapshot stopped at its entry limit: changes past it are not seen."""
    egress: list[EgressUse] = Field(default_factory=list)
    """Destinations its sandbox asked the egress proxy for (empty without egress)."""
    error: str | None
    """Why it failed, timed out or was stopped."""


class RunResult(BaseModel):
    """The last line of `warden run --json`, written exactly once, also when the run
    fails or is stopped."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    type: Literal["result"] = "result"
    """Always `result`: tells the result apart from the event lines before it."""
    schema_version: int = SCHEMA_VERSION
    """Version of this document's shape."""
    run_id: str | None
    """The run; null when it failed before it was recorded."""
    status: RunStatus
    """How the parent agent's run ended."""
    exit_code: int
    """The process's exit code (see the README's exit-code table)."""
    result: str
    """The parent agent's final answer (empty unless completed)."""
    error: str | None = None
    """Why the run failed, in one line."""
    duration_s: float
    """Wall time of the run."""
    tokens: int
    """Subagent tokens in total (every usage field)."""
    parent_tokens: int = 0
    """The parent agent's own tokens (every usage field over its model calls)."""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    """Subagent tokens by usage field, with the run's cache-hit share."""
    parent_usage: TokenUsage = Field(default_factory=TokenUsage)
    """The parent agent's tokens by usage field."""
    tasks: list[TaskSummary]
    """Every subagent task, in creation order."""
    denials: list[Denial]
    """Every denied tool call."""
    fail_on: list[Outcome]
    """The outcomes `--fail-on` named."""
    failed_on: list[Outcome]
    """Which of those happened (non-empty: exit code 3 unless a stronger one applies)."""
    sensitive_changes: JSONObject | None = None
    """Executed paths the run created, changed or removed (the end-of-run report)."""


def json_schema(name: Literal["events", "result"]) -> JSONObject:
    """The JSON Schema of one published document."""
    model: type[BaseModel] = Event if name == "events" else RunResult
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
