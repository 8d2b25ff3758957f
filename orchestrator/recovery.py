"""After a crash: find what a dead orchestrator left running, mark it
interrupted (resumable) and remove its containers by label."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator import labels


@dataclass
class Recovery:
    runs: list[str] = field(default_factory=list)
    """Runs whose orchestrator died while they were running."""
    tasks: list[str] = field(default_factory=list)
    """Their tasks that were pending or running, now `interrupted`."""
    containers: int = 0
    """Containers of those runs that were still on the engine and are now removed."""


def recover(store: Any, backend: Any) -> Recovery:
    """Blocking. Safe to call from any process at any time: a run whose
    orchestrator is alive is left alone."""
    found = Recovery()
    for run in store.stale_runs():
        tasks = [t.task_id for t in store.list_tasks(run_id=run.run_id) if t.status in _LIVE]
        store.mark_interrupted(tasks)
        found.containers += backend.cleanup({labels.RUN: run.run_id})
        store.finish_run(run.run_id, "interrupted", None)
        found.runs.append(run.run_id)
        found.tasks.extend(tasks)
    return found


_LIVE = ("pending", "running")
