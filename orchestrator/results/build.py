"""The result document of a run, built from what the store recorded (tasks, events,
audit), so it is the same whether the run completed, failed or was stopped."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

from pydantic import ValidationError

from orchestrator.exit_codes import ExitCode, Outcome, is_interrupted
from orchestrator.jsontypes import JSONObject
from orchestrator.results.models import (
    TASK_END_KINDS,
    Denial,
    EgressUse,
    Event,
    RunResult,
    RunStatus,
    TaskSummary,
    TokenUsage,
)

if TYPE_CHECKING:
    from orchestrator.store import AuditRecord, EventRecord, Store, TaskRecord

EGRESS_TOOL = "Network"
"""`tool_name` of egress decisions in the audit (`orchestrator.egress.verdict.TOOL_NAME`)."""
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "NotebookEdit": "notebook_path"}
"""Tools whose allowed calls count as files written, and the input naming the file."""


def stored_event(record: EventRecord) -> Event:
    """A stored event in the published shape (the store keeps the event as written;
    one the store had to clip keeps its kind and ids, with the clipped payload)."""
    try:
        return Event.model_validate(record.data)
    except ValidationError:
        return Event(
            ts=record.time,
            kind=record.kind,
            run_id=record.run_id,
            task_id=record.task_id,
            data=record.data,
        )


def task_summaries(
    tasks: Sequence[TaskRecord], events: Iterable[Event], audit: Iterable[AuditRecord]
) -> tuple[list[TaskSummary], list[Denial]]:
    """One summary per task (creation order) and every denial of the run."""
    tool_calls: Counter[str] = Counter()
    ended: dict[str, JSONObject] = {}
    egress: dict[str | None, dict[tuple[str, int], EgressUse]] = {}
    for event in events:
        if event.task_id is None:
            continue
        if event.kind == "egress_summary":
            _egress_bytes(egress.setdefault(event.task_id, {}), event.data)
        if event.kind == "task_running" and event.data.get("event") == "tool_started":
            tool_calls[event.task_id] += 1
        elif event.kind in TASK_END_KINDS:
            ended[event.task_id] = event.data
    denials: list[Denial] = []
    denied: Counter[str | None] = Counter()
    asked: Counter[str | None] = Counter()
    written: dict[str | None, list[str]] = {}
    for record in audit:
        if record.tool_name == EGRESS_TOOL:
            _egress_decision(egress.setdefault(record.task_id, {}), record)
        if record.decision == "ask":
            asked[record.task_id] += 1
        if record.final == "deny":
            denied[record.task_id] += 1
            denials.append(
                Denial(
                    task_id=record.task_id,
                    tool_name=record.tool_name,
                    input_hash=record.input_hash,
                    decided_by=record.decided_by,
                    reason=record.reason,
                )
            )
        elif record.tool_name in WRITE_TOOLS:
            path = record.tool_input.get(WRITE_TOOLS[record.tool_name])
            files = written.setdefault(record.task_id, [])
            if isinstance(path, str) and path not in files:
                files.append(path)
    summaries = []
    for task in tasks:
        end = ended.get(task.task_id, {})
        summaries.append(
            TaskSummary(
                task_id=task.task_id,
                parent_id=task.parent_id,
                depth=task.depth,
                agent_type=task.agent_type,
                description=task.description,
                status=task.status,
                duration_s=_duration(task, end),
                tokens=_int(end.get("tokens")),
                usage=TokenUsage.of(end.get("usage")),
                turns=_int(end.get("turns")),
                tool_calls=tool_calls[task.task_id],
                denials=denied[task.task_id],
                asks=asked[task.task_id],
                files_written=written.get(task.task_id, []),
                egress=list(egress.get(task.task_id, {}).values()),
                **_files_changed(end),
                error=task.error,
            )
        )
    return summaries, denials


def _egress_use(uses: dict[tuple[str, int], EgressUse], host: object, port: object) -> EgressUse:
    key = (str(host), _int(port))
    if key not in uses:
        uses[key] = EgressUse(host=key[0], port=key[1], connections=0, refused=0)
    return uses[key]


def _egress_decision(uses: dict[tuple[str, int], EgressUse], record: AuditRecord) -> None:
    """Count one egress decision (the audit holds one per connection)."""
    use = _egress_use(uses, record.tool_input.get("host"), record.tool_input.get("port"))
    if record.final == "allow":
        use.connections += 1
    else:
        use.refused += 1


def _egress_bytes(uses: dict[tuple[str, int], EgressUse], data: JSONObject) -> None:
    """Bytes per destination from a task's `egress_summary` event."""
    listed = data.get("destinations")
    for item in listed if isinstance(listed, list) else []:
        if isinstance(item, dict):
            use = _egress_use(uses, item.get("host"), item.get("port"))
            use.bytes_up = _int(item.get("bytes_up"))
            use.bytes_down = _int(item.get("bytes_down"))


def outcomes(tasks: Sequence[TaskSummary], denials: Sequence[Denial] = ()) -> set[Outcome]:
    """Which `--fail-on` outcomes happened (a Task call refused before any task
    existed is a denial of the parent's, `task_id` None)."""
    found: set[Outcome] = set()
    if any(d.task_id is None for d in denials):
        found.add("denied")
    for task in tasks:
        if task.status in ("failed", "disk_limit"):  # disk_limit: killed, so it failed
            found.add("failed")
        if task.status == "timed_out":
            found.add("timed_out")
        if task.denials:
            found.add("denied")
        if task.asks:
            found.add("asked")
    return found


APPLY_OUTCOMES: dict[str, Outcome] = {
    "rejected_by_policy": "rejected",
    "rejected_by_person": "rejected",
    "conflicted": "conflict",
}


def apply_outcomes(audit: Sequence[AuditRecord]) -> set[Outcome]:
    """The `--fail-on` outcomes of the run's apply decisions (audit records of tool
    `Apply`, `orchestrator.apply.review.audit_to`)."""
    found: set[Outcome] = set()
    for record in audit:
        if record.tool_name == "Apply" and record.source == "apply":
            outcome = APPLY_OUTCOMES.get(str(record.tool_input.get("outcome")))
            if outcome is not None:
                found.add(outcome)
    return found


def final_exit_code(base: int, failed_on: Sequence[Outcome]) -> int:
    """`base` (the run's own code) unless it was a success and `--fail-on` matched."""
    if base == ExitCode.OK and failed_on:
        return int(ExitCode.OUTCOME)
    return base


def build_result(
    store: Store | None,
    run_id: str | None,
    *,
    base_code: int,
    status: RunStatus,
    text: str,
    error: str | None,
    started: float,
    fail_on: Sequence[Outcome] = (),
    sensitive: JSONObject | None = None,
    parent_tokens: int = 0,
    parent_usage: TokenUsage | None = None,
) -> RunResult:
    """The run's result document; `base_code` is the exit code before `--fail-on`."""
    tasks: list[TaskSummary] = []
    denials: list[Denial] = []
    if store is not None and run_id is not None:
        tasks, denials = task_summaries(
            store.list_tasks(run_id=run_id),
            (stored_event(e) for e in store.events(run_id=run_id)),
            store.audit(run_id),
        )
    happened = outcomes(tasks, denials)
    if store is not None and run_id is not None:
        happened |= apply_outcomes(store.audit(run_id))
    failed_on = [o for o in fail_on if o in happened]
    if is_interrupted(base_code) and status == "completed":
        status = "stopped"
    return RunResult(
        run_id=run_id,
        status=status,
        exit_code=final_exit_code(base_code, failed_on),
        result=text if status == "completed" else "",
        error=error,
        duration_s=round(time.time() - started, 3),
        tokens=sum(t.tokens for t in tasks),
        parent_tokens=parent_tokens,
        usage=sum((t.usage for t in tasks), TokenUsage()).with_share(),
        parent_usage=parent_usage or TokenUsage(),
        tasks=tasks,
        denials=denials,
        fail_on=list(fail_on),
        failed_on=failed_on,
        sensitive_changes=sensitive,
    )


def _duration(task: TaskRecord, end: JSONObject) -> float | None:
    reported = end.get("duration_s")
    if isinstance(reported, int | float) and not isinstance(reported, bool):
        return float(reported)
    if task.ended_at is None:
        return None
    return round(task.ended_at - (task.started_at or task.created_at), 3)


class _FilesChanged(TypedDict, total=False):
    files_changed: list[str]
    files_changed_count: int
    files_attribution: Literal["sole", "shared"]
    files_scan_truncated: bool


def _files_changed(end: JSONObject) -> _FilesChanged:
    """The workspace changes a task's end event carries, checked (events are data)."""
    paths = end.get("files_changed")
    attribution = end.get("files_attribution")
    if not isinstance(paths, list) or attribution not in ("sole", "shared"):
        return {}
    return _FilesChanged(
        files_changed=[p for p in paths if isinstance(p, str)],
        files_changed_count=_int(end.get("files_changed_count")),
        files_attribution="sole" if attribution == "sole" else "shared",
        files_scan_truncated=end.get("files_scan_truncated") is True,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
