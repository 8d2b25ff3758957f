"""Which tasks of a run have recorded their end, and waiting until all have.

A task's end (its status, its `task_*` event) is recorded once, by the manager's
`_conclude`, often in a shielded step that outlives the coroutine a stop cancelled.
The run must not close its store, print its summary or write its result document
while such a step is still under way, or a stopped task stays `running` there.
`TaskEndings` is the ledger: `begin` when a task's end starts being recorded, `done`
when it is; `settle` waits (bounded) until every task of the run is done, and names
the tasks that never began to end, so the manager records them itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

SETTLE_S = 20.0
"""Longest a run's close waits for its stopped tasks to record their ends, below the
CLI's own bound on a stop (`lifecycle.interrupts.STOP_GRACE_S`)."""


class TaskEndings:
    """The ledger of task ends: begun, done, and a wait for all of them."""

    def __init__(self) -> None:
        self._begun: set[str] = set()
        self._done: set[str] = set()
        self._changed = asyncio.Event()

    def begin(self, task_id: str) -> bool:
        """Mark `task_id`'s end as being recorded; False when it already was."""
        if task_id in self._begun:
            return False
        self._begun.add(task_id)
        return True

    def done(self, task_id: str) -> None:
        self._done.add(task_id)
        self._changed.set()

    async def settle(self, task_ids: Iterable[str], timeout_s: float = SETTLE_S) -> list[str]:
        """Wait until every task in `task_ids` has recorded its end, at most
        `timeout_s`; the ones whose end never began (the caller records those)."""
        ids = list(task_ids)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            self._changed.clear()  # before the check: no end between them is missed
            remaining = deadline - loop.time()
            if all(t in self._done for t in ids) or remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                break
        return [t for t in ids if t not in self._done and t not in self._begun]
