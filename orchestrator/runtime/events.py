"""Run events: one record per thing that happened, to the store, a JSONL file
and any live listeners (the progress display, `--json` output)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from orchestrator.errors import StoreError
from orchestrator.jsontypes import JSONLike, to_json_object
from orchestrator.results.models import TASK_EVENT_KINDS, Event

if TYPE_CHECKING:
    from orchestrator.store import Store

log = logging.getLogger(__name__)

__all__ = ["TASK_EVENT_KINDS", "Event", "EventLog", "Listener", "TaskIdentity"]

Listener = Callable[[Event], None]


class TaskIdentity(Protocol):
    """What an event says about the task it concerns."""

    @property
    def task_id(self) -> str: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def agent_type(self) -> str: ...
    @property
    def trace_id(self) -> str | None: ...


class EventLog:
    """Fans events out. Listeners run on the event loop and must not block.

    Recording is not optional: a run whose events cannot be written (disk full, an
    unwritable state dir) must end rather than go on unrecorded. The first failure
    becomes `failure` (a StoreError that says what to do), is handed to the
    `on_failure` callbacks (the run stops itself there) and is raised to the caller;
    later ones are raised without further noise.

    Raises StoreError at construction when the events file cannot be created."""

    def __init__(
        self,
        run_id: str,
        jsonl_path: Path,
        store: Store | None = None,
        *,
        listeners: Iterable[Listener] = (),
        on_failure: Iterable[Callable[[StoreError], None]] = (),
    ) -> None:
        self.run_id = run_id
        self.jsonl_path = jsonl_path
        self.store = store
        self.listeners: list[Listener] = list(listeners)
        """Called with each event (a front door may subscribe later: `_frame.drive`)."""
        self.failure: StoreError | None = None
        self.on_failure: list[Callable[[StoreError], None]] = list(on_failure)
        try:
            jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            with jsonl_path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise _unwritable(jsonl_path, exc) from exc
        self._lock = asyncio.Lock()

    async def emit(
        self,
        kind: str,
        *,
        task_id: str | None = None,
        parent_id: str | None = None,
        agent_type: str | None = None,
        trace_id: str | None = None,
        **data: JSONLike,
    ) -> Event:
        event = Event(
            kind=kind,
            run_id=self.run_id,
            task_id=task_id,
            parent_id=parent_id,
            agent_type=agent_type,
            trace_id=trace_id,
            data=to_json_object(data),
        )
        line = event.model_dump_json() + "\n"
        async with self._lock:
            try:
                await asyncio.to_thread(self._write, event, line)
            except StoreError as exc:
                self._failed(exc)
                raise
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed on %s", kind)
        return event

    async def emit_for(self, kind: str, task: TaskIdentity, **data: JSONLike) -> Event:
        """`emit` for an event about `task` (its ids, agent type and trace)."""
        return await self.emit(
            kind,
            task_id=task.task_id,
            parent_id=task.parent_id,
            agent_type=task.agent_type,
            trace_id=task.trace_id,
            **data,
        )

    def _failed(self, exc: StoreError) -> None:
        if self.failure is not None:
            return
        self.failure = exc
        for callback in self.on_failure:
            try:
                callback(exc)
            except Exception:
                log.exception("an on_failure callback failed")

    def _write(self, event: Event, line: str) -> None:
        try:
            with self.jsonl_path.open("a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError as exc:
            raise _unwritable(self.jsonl_path, exc) from exc
        if self.store is not None:
            self.store.append_event(
                self.run_id, event.task_id, event.kind, json.loads(event.model_dump_json())
            )


def _unwritable(path: Path, exc: OSError) -> StoreError:
    reason = exc.strerror or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        fix = "free space on that disk, then `warden ps` shows what was recorded"
    else:
        fix = "make it a writable file in a writable directory, or set WARDEN_STATE_DIR"
    return StoreError(f"cannot write the run's event log {path} ({reason}); {fix}")
