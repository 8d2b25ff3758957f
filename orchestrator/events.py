"""Run events: one record per thing that happened, to the store, a JSONL file
and any live listeners (the progress display, `--json` output)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.results.models import Event

log = logging.getLogger(__name__)

__all__ = ["TASK_EVENT_KINDS", "Event", "EventLog", "Listener"]

TASK_EVENT_KINDS = (
    "task_started",
    "task_running",
    "task_completed",
    "task_failed",
    "task_timed_out",
    "task_stopped",
    "task_interrupted",
)


Listener = Callable[[Event], None]


class EventLog:
    """Fans events out. Listeners run on the event loop and must not block."""

    def __init__(self, run_id: str, jsonl_path: Path, store: Any | None = None) -> None:
        self.run_id = run_id
        self.jsonl_path = jsonl_path
        self.store = store
        self.listeners: list[Listener] = []
        jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = asyncio.Lock()

    async def emit(
        self,
        kind: str,
        *,
        task_id: str | None = None,
        parent_id: str | None = None,
        agent_type: str | None = None,
        trace_id: str | None = None,
        **data: Any,
    ) -> Event:
        event = Event(
            kind=kind,
            run_id=self.run_id,
            task_id=task_id,
            parent_id=parent_id,
            agent_type=agent_type,
            trace_id=trace_id,
            data=data,
        )
        line = event.model_dump_json() + "\n"
        async with self._lock:
            await asyncio.to_thread(self._write, event, line)
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed on %s", kind)
        return event

    def _write(self, event: Event, line: str) -> None:
        with self.jsonl_path.open("a", encoding="utf-8") as fh:
            fh.write(line)
        if self.store is not None:
            self.store.append_event(
                self.run_id, event.task_id, event.kind, json.loads(event.model_dump_json())
            )
