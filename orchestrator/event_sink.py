"""Where a run's events go, as seen by everything that reports one: the task manager,
the permission gate and the egress proxy (`EventSink`), and what an event says
about the task it concerns (`TaskIdentity`). `runtime.events.EventLog` is the real
sink; tests and `warden exec` pass their own.

A foundation, so every floor that reports events names the same protocol.
May import: `errors`, `jsontypes`.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.errors import StoreError
from orchestrator.jsontypes import JSONLike


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


class EventSink(Protocol):
    """Where run events go (`runtime.events.EventLog` is the real one)."""

    run_id: str
    failure: StoreError | None
    """Set once events could not be recorded (the run is stopping)."""

    async def emit(
        self,
        kind: str,
        *,
        task_id: str | None = None,
        parent_id: str | None = None,
        agent_type: str | None = None,
        trace_id: str | None = None,
        **data: JSONLike,
    ) -> object:
        """Record one event of the run (one of no task: leave the ids out)."""
        ...

    async def emit_for(self, kind: str, task: TaskIdentity, **data: JSONLike) -> object:
        """Record one event about `task` (its ids, agent type and trace go with it)."""
        ...

    def record_for(self, kind: str, task: TaskIdentity, **data: JSONLike) -> object:
        """Queue one event about `task` without waiting for it to be written (progress a
        container reports); written in order before any later `emit` returns."""
        ...
