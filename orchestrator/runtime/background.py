"""Tasks started with `run_in_background`: their runners, and the results that
wait to be reported to their parent (as notifications the parent's next turn
receives). A parent waits on `next_finished` instead of polling.
"""

from __future__ import annotations

import asyncio

from orchestrator.runtime.tasks import TaskContext, TaskResult


class BackgroundTasks:
    """The background tasks of one run, by parent (None: the root agent)."""

    def __init__(self) -> None:
        self._runners: dict[str, asyncio.Task[TaskResult]] = {}
        self._parents: dict[str, str | None] = {}
        self._unreported: dict[str | None, list[TaskResult]] = {}
        self._changed = asyncio.Condition()

    def add(self, ctx: TaskContext, runner: asyncio.Task[TaskResult]) -> None:
        self._runners[ctx.task_id] = runner
        self._parents[ctx.task_id] = ctx.parent_id

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._runners

    def runner(self, task_id: str) -> asyncio.Task[TaskResult] | None:
        return self._runners.get(task_id)

    def running(self) -> list[asyncio.Task[TaskResult]]:
        return [r for r in self._runners.values() if not r.done()]

    def running_ids(self) -> set[str]:
        return {tid for tid, r in self._runners.items() if not r.done()}

    def has_running(self, parent_id: str | None) -> bool:
        """Whether a background task of this parent is still running."""
        return any(
            not r.done() and self._parents[tid] == parent_id for tid, r in self._runners.items()
        )

    def unreported(self, parent_id: str | None) -> list[TaskResult]:
        """Finished, not yet reported (a copy; `take` empties it)."""
        return list(self._unreported.get(parent_id, []))

    def take(self, parent_id: str | None) -> list[TaskResult]:
        return self._unreported.pop(parent_id, [])

    def reported(self, parent_id: str | None, result: TaskResult) -> None:
        """The parent got this result another way (TaskOutput): not a notification."""
        pending = self._unreported.get(parent_id, [])
        if result in pending:
            pending.remove(result)

    async def ended(self, ctx: TaskContext, result: TaskResult) -> None:
        """A task ended: if it ran in the background, its result waits for its parent."""
        if ctx.task_id in self._runners:
            self._unreported.setdefault(ctx.parent_id, []).append(result)
        async with self._changed:
            self._changed.notify_all()

    async def next_finished(self, parent_id: str | None) -> None:
        """Block until a background task of this parent finishes (or none is left)."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: bool(self._unreported.get(parent_id)) or not self.has_running(parent_id)
            )
