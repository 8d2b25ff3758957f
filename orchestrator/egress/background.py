"""One task's egress proxy on its own event-loop thread, for synchronous callers.

`warden exec` waits for its container in the calling thread (the docker calls are
blocking); its proxy must keep serving meanwhile, so it runs here, on a daemon
thread with its own loop. Unknown destinations are denied (there is no one to
ask: `warden exec --allow-domain` names what a one-off command may reach).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path

from orchestrator.egress.service import EgressService, TaskEgress
from orchestrator.errors import StoreError
from orchestrator.event_sink import TaskIdentity
from orchestrator.jsontypes import JSONLike

START_TIMEOUT_S = 10.0


@dataclass
class OneOffTask:
    """The task (`permissions.approvers.AskingTask`) of a command that is not part of a run."""

    task_id: str
    run_id: str = ""
    parent_id: str | None = None
    trace_id: str = ""
    description: str = ""
    agent: str = "exec"

    @property
    def agent_type(self) -> str:
        return self.agent


class EventRecorder:
    """An `EventSink` that collects `egress_denied` / `egress_summary` events in memory
    (a one-off command has no run to record them in)."""

    run_id = ""
    failure: StoreError | None = None

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    async def emit(self, kind: str, **data: JSONLike) -> None:
        self.events.append((kind, dict(data)))

    async def emit_for(self, kind: str, task: TaskIdentity, **data: JSONLike) -> None:
        await self.emit(kind, task_id=task.task_id, **data)

    def record_for(self, kind: str, task: TaskIdentity, **data: JSONLike) -> None:
        self.events.append((kind, {"task_id": task.task_id, **data}))


class BackgroundEgress:
    """`service.open` on a private loop thread; `close()` stops it and returns the summary."""

    def __init__(
        self, service: EgressService, task: OneOffTask, socket_dir: Path, recorder: EventRecorder
    ) -> None:
        """`recorder`: the events `service` was built with (`close`, `denials` read them)."""
        self.recorder = recorder
        self.service = service
        self.task = task
        self.socket_dir = socket_dir
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._egress: TaskEgress | None = None

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            self.service.open(self.task, None, self.socket_dir), self._loop
        )
        self._egress = future.result(START_TIMEOUT_S)

    def close(self) -> dict[str, object]:
        """Stop the proxy; the task's `egress_summary` data (empty when it never started)."""
        try:
            if self._egress is not None:
                asyncio.run_coroutine_threadsafe(self._egress.close(), self._loop).result(
                    START_TIMEOUT_S
                )
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)
            self._loop.close()
        summaries = [data for kind, data in self.recorder.events if kind == "egress_summary"]
        return summaries[-1] if summaries else {}

    def denials(self) -> list[dict[str, object]]:
        return [data for kind, data in self.recorder.events if kind == "egress_denied"]
