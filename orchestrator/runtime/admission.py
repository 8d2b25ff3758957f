"""Who may start a subagent now: `max_concurrent_total` slots and a bounded FIFO
queue in front of them.

A task takes a `Ticket` when it is created (synchronously, so FIFO order is call
order and a full queue is refused before anything is recorded), waits on it,
and hands its slot back when it ends. A nested task that its parent waits for
runs on its parent's slot (the parent's sandbox is idle meanwhile), so parents
waiting for children can never hold every slot while the children wait in the
queue: the queue cannot deadlock. A second concurrent child of the same parent
queues like any other task.

Written here rather than with `asyncio.Semaphore`: the queue must be bounded,
refuse when full before the task exists, report how long each task waited, and
let a stopped task leave the queue without ever starting.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from orchestrator.errors import WardenError


class QueueFullError(WardenError):
    """Every slot is taken and the queue is full; the task was not created."""


@dataclass(eq=False)
class Ticket:
    """One task's claim on a slot."""

    queued: bool
    """True when the task had to wait (no slot was free when it was created)."""
    position: int = 0
    """Tasks ahead of it in the queue when it joined (0 when not queued)."""
    created: float = field(default_factory=time.monotonic)
    waited_s: float = 0.0
    """How long it waited for its slot (set once admitted)."""
    borrowed_from: Ticket | None = None
    """The parent's ticket whose slot this nested task runs on."""
    lent: bool = False
    """Its slot is lent to a child right now."""
    released: bool = False
    withdrawn: bool = False
    _turn: asyncio.Future[None] | None = field(default=None, repr=False)


class AdmissionQueue:
    """`slots` tasks run at once; up to `queue_limit` more wait, first come first served."""

    def __init__(self, slots: int, queue_limit: int) -> None:
        if slots < 1 or queue_limit < 0:
            raise ValueError("need at least one slot and a queue limit >= 0")
        self.slots = slots
        self.queue_limit = queue_limit
        self.running = 0
        self._waiting: deque[Ticket] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def take(self, parent: Ticket | None = None) -> Ticket:
        """A ticket for a new task; raises QueueFullError when it would have to wait
        and the queue is full. A child takes its waiting parent's slot if it is free."""
        if parent is not None and not parent.lent and not parent.released:
            parent.lent = True
            return Ticket(queued=False, borrowed_from=parent)
        if self.running < self.slots and not self._waiting:
            self.running += 1
            return Ticket(queued=False)
        if len(self._waiting) >= self.queue_limit:
            raise QueueFullError(
                f"max_concurrent_total cap ({self.slots}) reached and the queue is full "
                f"({self.queue_limit} tasks waiting, the queue_limit): the task was not "
                "started. Wait for some to finish, or do the work yourself."
            )
        ticket = Ticket(queued=True, position=len(self._waiting))
        ticket._turn = asyncio.get_running_loop().create_future()
        self._waiting.append(ticket)
        return ticket

    async def wait(self, ticket: Ticket) -> bool:
        """Wait until the ticket's slot is free; False when it was withdrawn first."""
        if ticket._turn is not None and not ticket._turn.done():
            try:
                await asyncio.shield(ticket._turn)
            except asyncio.CancelledError:
                self.withdraw(ticket)
                raise
        ticket.waited_s = time.monotonic() - ticket.created if ticket.queued else 0.0
        return not ticket.withdrawn

    def withdraw(self, ticket: Ticket) -> None:
        """Leave the queue without running (a task stopped while it waited)."""
        if ticket in self._waiting:
            self._waiting.remove(ticket)
            ticket.withdrawn = True
            ticket.released = True
            if ticket._turn is not None and not ticket._turn.done():
                ticket._turn.set_result(None)

    def release(self, ticket: Ticket) -> None:
        """The task ended: its slot goes to the next in the queue (or back to its parent)."""
        if ticket.released:
            return
        ticket.released = True
        if ticket.borrowed_from is not None:
            parent = ticket.borrowed_from
            parent.lent = False
            if parent.released:  # the parent ended first: its slot was kept for us
                self._pass_on()
            return
        if ticket.queued and ticket._turn is not None and not ticket._turn.done():
            self.withdraw(ticket)  # ended before its turn came
            return
        if ticket.lent:
            return  # a child still runs on this slot; it passes it on when it ends
        self._pass_on()

    def _pass_on(self) -> None:
        while self._waiting:
            following = self._waiting.popleft()
            if following._turn is not None and not following._turn.done():
                following._turn.set_result(None)  # the slot passes on: running unchanged
                return
        self.running -= 1
