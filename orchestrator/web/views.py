"""What the page shows, read from the store: runs, a run's task tree, a task's
events and transcript, the audit with filters. Read only; every call is one
short read (call them through a worker thread).

Every string that may have come from a container is made visible here with
`untrusted_text` (controls, bidi overrides, zero-width characters become
escapes, as on the terminal) and cut with the cut announced; the page then puts
it on screen with `textContent` only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.results.models import TASK_END_KINDS, TokenUsage
from orchestrator.store import Store
from orchestrator.untrusted_text import as_data, printable

DESCRIPTION_CHARS = 300
"""Shown of a task's description in the tree."""
TOOL_DETAIL_CHARS = 200
"""Shown of the current tool call's detail."""
EVENT_TEXT_CHARS = 2000
"""Shown of one event's data."""
TASK_EVENTS_SHOWN = 500
"""A task's most recent events shown; earlier ones are counted."""
PART_CHARS = 20_000
"""Shown of one block of a transcript message."""
MESSAGES_SHOWN = 400
"""A transcript's most recent messages shown; earlier ones are counted."""
AUDIT_SHOWN = 1000
"""Audit records shown (the newest matching); the rest are counted."""
AUDIT_INPUT_CHARS = 600
"""Shown of a tool input in an audit row."""
RUN_PROMPT_CHARS = 200
"""Shown of a run's prompt in the list of runs."""
RUNS_SHOWN = 50
"""Most recent runs listed by `warden ui`."""


def _text(value: object, limit: int) -> str:
    return printable(value, limit, multiline=True)


def _json_text(value: JSONValue, limit: int) -> str:
    return _text(json.dumps(value, ensure_ascii=False, indent=1), limit)


def runs(store: Store, only: str | None = None) -> list[JSONObject]:
    """The most recent runs (or just `only`), newest first."""
    records = [store.get_run(only)] if only is not None else store.list_runs(RUNS_SHOWN)
    return [
        {
            "run_id": as_data(r.run_id),
            "status": r.status,
            "created_at": r.created_at,
            "ended_at": r.ended_at,
            "model": as_data(r.model),
            "workspace": as_data(r.workspace),
            "prompt": _text(r.prompt, RUN_PROMPT_CHARS),
        }
        for r in records
    ]


@dataclass
class _Seen:
    """What a task's events have said so far."""

    tools: dict[str, int] = field(default_factory=dict)
    current: str = ""
    denials: int = 0
    asked: int = 0
    usage: TokenUsage | None = None
    events: int = 0


class TaskTree:
    """A run's task tree, with what its events say folded in as they arrive (each
    refresh reads only the events after the last one seen)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._last_event = 0
        self._seen: dict[str, _Seen] = {}
        self.audit_count = 0

    def refresh(self, store: Store) -> JSONObject:
        for record in store.events(run_id=self.run_id, after_id=self._last_event):
            self._last_event = record.event_id
            if record.task_id is not None:
                self._fold(record.task_id, record.kind, record.data)
        run = store.get_run(self.run_id)
        tasks = store.list_tasks(run_id=self.run_id)
        self.audit_count = store.audit_count(self.run_id)
        now = time.time()
        rows: list[JSONValue] = []
        for t in tasks:
            seen = self._seen.get(t.task_id, _Seen())
            usage = seen.usage
            start = t.started_at or t.created_at
            rows.append(
                {
                    "task_id": t.task_id,
                    "parent_id": t.parent_id,
                    "depth": t.depth,
                    "agent_type": printable(t.agent_type, 80),
                    "description": printable(t.description, DESCRIPTION_CHARS),
                    "status": t.status,
                    "elapsed_s": round((t.ended_at or now) - start, 1),
                    "tokens": t.tokens,
                    "cache_share": usage.cache_hit_share if usage is not None else None,
                    "tools": dict(sorted(seen.tools.items())),
                    "current": seen.current,
                    "denials": seen.denials,
                    "asked": seen.asked,
                    "events": seen.events,
                    "error": printable(t.error or "", DESCRIPTION_CHARS),
                }
            )
        return {
            "run": runs(store, self.run_id)[0] | {"ended_at": run.ended_at},
            "tasks": rows,
            "audit_count": self.audit_count,
            "last_event": self._last_event,
        }

    def _fold(self, task_id: str, kind: str, event: JSONObject) -> None:
        seen = self._seen.setdefault(task_id, _Seen())
        seen.events += 1
        data = event.get("data")
        data = data if isinstance(data, dict) else {}
        if kind == "task_running":
            what = data.get("event")
            name = printable(data.get("tool_name") or "?", 60)
            if what == "tool_started":
                seen.tools[name] = seen.tools.get(name, 0) + 1
                seen.current = printable(f"{name}: {data.get('detail') or ''}", TOOL_DETAIL_CHARS)
            elif what == "tool_finished":
                seen.current = ""
        elif kind == "permission_denied":
            seen.denials += 1
        elif kind == "approval_requested":
            seen.asked += 1
        elif kind in TASK_END_KINDS:
            seen.current = ""
            seen.usage = TokenUsage.of(data.get("usage"))


def task_events(store: Store, run_id: str, task_id: str) -> JSONObject:
    """A task's events, each as time, kind and its data made visible. Raises
    TaskNotFoundError for a task of another run (or none)."""
    _own_task(store, run_id, task_id)
    records = store.events(run_id=run_id, task_id=task_id)
    shown = records[-TASK_EVENTS_SHOWN:]
    return {
        "earlier": len(records) - len(shown),
        "events": [
            {
                "id": r.event_id,
                "time": r.time,
                "kind": printable(r.kind, 80),
                "text": _json_text(_payload(r.data), EVENT_TEXT_CHARS),
            }
            for r in shown
        ],
    }


def _payload(event: JSONObject) -> JSONValue:
    data = event.get("data")
    return data if isinstance(data, dict) else event


def transcript(store: Store, run_id: str, task_id: str) -> JSONObject:
    """A task's last transcript checkpoint, one entry per message with its blocks as
    visible text. Raises TaskNotFoundError for a task of another run (or none)."""
    _own_task(store, run_id, task_id)
    messages = store.get_transcript(task_id)
    shown = messages[-MESSAGES_SHOWN:]
    return {
        "earlier": len(messages) - len(shown),
        "messages": [
            {"role": printable(m.get("role", "?"), 40), "parts": _parts(m.get("content"))}
            for m in shown
        ],
    }


def _parts(content: JSONValue) -> list[JSONValue]:
    if isinstance(content, str):
        return [_text(content, PART_CHARS)]
    if not isinstance(content, list):
        return [_json_text(content, PART_CHARS)]
    parts: list[JSONValue] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(_text(block.get("text", ""), PART_CHARS))
        elif isinstance(block, dict) and block.get("type") == "tool_use":
            head = f"[tool call {block.get('name')}] "
            parts.append(_text(head + json.dumps(block.get("input")), PART_CHARS))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content")
            body = inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)
            parts.append(_text(f"[tool result] {body}", PART_CHARS))
        else:
            parts.append(_json_text(block, PART_CHARS))
    return parts


AUDIT_FILTERS = ("final", "decision", "tool", "task", "text")
"""Query parameters the audit view filters on (exact, but `text`: a substring)."""


def audit(store: Store, run_id: str, filters: dict[str, str]) -> JSONObject:
    """The run's permission decisions, newest first, filtered."""
    records = store.audit(run_id)
    text = filters.get("text", "").lower()
    chosen = [
        r
        for r in records
        if filters.get("final") in (None, "", r.final)
        and filters.get("decision") in (None, "", r.decision)
        and filters.get("tool") in (None, "", r.tool_name)
        and filters.get("task") in (None, "", r.task_id)
        and (not text or text in f"{r.decided_by}\n{r.reason}\n{json.dumps(r.tool_input)}".lower())
    ]
    shown = chosen[::-1][:AUDIT_SHOWN]
    return {
        "total": len(records),
        "matching": len(chosen),
        "tools": list[JSONValue](sorted({printable(r.tool_name, 60) for r in records})),
        "records": [
            {
                "time": r.time,
                "task_id": r.task_id,
                "agent_type": printable(r.agent_type, 80),
                "tool_name": printable(r.tool_name, 60),
                "input": _json_text(r.tool_input, AUDIT_INPUT_CHARS),
                "decision": r.decision,
                "final": r.final,
                "decided_by": printable(r.decided_by, 300),
                "source": printable(r.source, 300),
                "reason": _text(r.reason, 1000),
            }
            for r in shown
        ],
    }


def _own_task(store: Store, run_id: str, task_id: str) -> None:
    from orchestrator.store.connection import task_not_found

    if store.get_task(task_id).run_id != run_id:
        raise task_not_found(task_id)
