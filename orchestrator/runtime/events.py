"""Run events: one record per thing that happened, to the store, a JSONL file
and any live listeners (the progress display, `--json` output, the web page, an MCP
client, a library caller's `subscribe`)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import StoreError
from orchestrator.event_sink import TaskIdentity
from orchestrator.jsontypes import JSONLike, to_json_object
from orchestrator.results.models import TASK_EVENT_KINDS, Event

if TYPE_CHECKING:
    from orchestrator.store import Store

log = logging.getLogger(__name__)

__all__ = ["TASK_EVENT_KINDS", "Event", "EventLog", "Listener", "TaskIdentity"]

Listener = Callable[[Event], None]


class EventLog:
    """Fans events out. Listeners run on the event loop and must not block; each hears
    an event once it is written, in the order of the file (so `--json` output is the
    file, line for line), and hears nothing a failed write lost. Those the
    run is built with (its tracer) are passed in; a front door that comes to a run
    already open (the progress display, the web page, an MCP call, the library's
    `WardenRun.subscribe`) calls `subscribe` and keeps the handle that ends it.

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
        self._listeners: list[Listener] = list(listeners)
        self.failure: StoreError | None = None
        self._on_failure: tuple[Callable[[StoreError], None], ...] = tuple(on_failure)
        try:
            jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            with jsonl_path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise _unwritable(jsonl_path, exc) from exc
        self._pending: list[tuple[Event, tuple[Listener, ...]]] = []
        self._batch: asyncio.Future[None] | None = None
        """Done when the queued events (`_pending`) are written."""
        self._drainer: asyncio.Task[None] | None = None

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` with every event made from now on, as each is written;
        returns the function that unsubscribes it (no call after it returns; calling it
        twice is harmless)."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

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
        """Record an event and return once it is written (with every event before it).
        Raises StoreError when it could not be."""
        event = self._event(kind, task_id, parent_id, agent_type, trace_id, data)
        await self._enqueue(event)
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

    def record_for(self, kind: str, task: TaskIdentity, **data: JSONLike) -> Event:
        """Queue an event about `task` and return without waiting for the write: for
        progress a container reports (tool started/finished, model text), so recording
        it is not on the path that answers the container's next request. Queued events
        are written in order, batched, before any later `emit` returns; a failure goes
        to `on_failure` (the run stops) and is raised by the next `emit`."""
        event = self._event(
            kind, task.task_id, task.parent_id, task.agent_type, task.trace_id, data
        )
        self._enqueue(event)
        return event

    async def flush(self) -> None:
        """Return once every queued event is written (or its batch failed)."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.shield(self._drainer)

    def _event(
        self,
        kind: str,
        task_id: str | None,
        parent_id: str | None,
        agent_type: str | None,
        trace_id: str | None,
        data: dict[str, JSONLike],
    ) -> Event:
        return Event(
            kind=kind,
            run_id=self.run_id,
            task_id=task_id,
            parent_id=parent_id,
            agent_type=agent_type,
            trace_id=trace_id,
            data=to_json_object(data),
        )

    def _tell(self, told: list[tuple[Event, tuple[Listener, ...]]]) -> None:
        for event, listeners in told:
            for listener in listeners:
                if listener not in self._listeners:
                    continue  # unsubscribed while the event was being written
                try:
                    listener(event)
                except Exception:
                    log.exception("event listener failed on %s", event.kind)

    def _enqueue(self, event: Event) -> asyncio.Future[None]:
        """Queue `event` for the writer; the future is its batch's (done when written).
        The listeners subscribed now are the ones told, once the event is written."""
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
            # `record_for` callers never await it: its error is reported by _failed.
            self._batch.add_done_callback(_retrieve)
        self._pending.append((event, tuple(self._listeners)))
        batch = self._batch
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(), name="warden-event-writer")
        return batch

    async def _drain(self) -> None:
        """Write queued events, a batch at a time, until none is left, and then tell
        the listeners about them. One drainer at a time, so batches reach the file, the
        store and every listener in the order they were queued: what a listener sees
        (`--json`, the progress display, an MCP client) is the file's order, and only
        what is recorded."""
        while self._pending:
            queued, batch = self._pending, self._batch
            self._pending, self._batch = [], None
            assert batch is not None
            try:
                # Shielded: a cancelled run still writes what it queued (the thread
                # finishes the batch either way; the shield keeps the result ours).
                events = [event for event, _ in queued]
                await asyncio.shield(asyncio.to_thread(self._write, events))
            except StoreError as exc:
                self._failed(exc)
                batch.set_exception(exc)
            except asyncio.CancelledError:
                batch.cancel()
                raise
            except Exception as exc:  # a bug, not a full disk: said, and the waiters freed
                log.exception("could not record %d event(s)", len(events))
                batch.set_exception(exc)
            else:
                self._tell(queued)
                batch.set_result(None)

    def _failed(self, exc: StoreError) -> None:
        if self.failure is not None:
            return
        self.failure = exc
        for callback in self._on_failure:
            try:
                callback(exc)
            except Exception:
                log.exception("an on_failure callback failed")

    def _write(self, events: list[Event]) -> None:
        """One append to the JSONL file and one store transaction for the batch."""
        lines = [event.model_dump_json() for event in events]
        try:
            with self.jsonl_path.open("a", encoding="utf-8") as fh:
                fh.write("".join(line + "\n" for line in lines))
        except OSError as exc:
            raise _unwritable(self.jsonl_path, exc) from exc
        if self.store is not None:
            self.store.append_events(
                self.run_id,
                [
                    (e.task_id, e.kind, json.loads(line))
                    for e, line in zip(events, lines, strict=True)
                ],
            )


def _retrieve(batch: asyncio.Future[None]) -> None:
    if not batch.cancelled():
        batch.exception()


def _unwritable(path: Path, exc: OSError) -> StoreError:
    reason = exc.strerror or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        fix = "free space on that disk, then `warden ps` shows what was recorded"
    else:
        fix = "make it a writable file in a writable directory, or set WARDEN_STATE_DIR"
    return StoreError(f"cannot write the run's event log {path} ({reason}); {fix}")
