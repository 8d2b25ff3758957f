"""`Changes`: a cheap "something happened" signal for the page's live streams.

The run's event listener and the approver bump it; each open stream waits on it
(or on its poll interval) and then reads what is new. With no page open nothing
waits, so a bump costs an integer increment and one `Event.set`.
"""

from __future__ import annotations

import asyncio
import contextlib

from orchestrator.results.models import Event


class Changes:
    """A version number and a way to wait for the next one."""

    def __init__(self) -> None:
        self.version = 0
        self._event: asyncio.Event | None = None

    def bump(self) -> None:
        self.version += 1
        if self._event is not None:
            self._event.set()
            self._event = None

    def __call__(self, event: Event) -> None:
        """An `EventLog` listener: every event of the run is a change."""
        self.bump()

    async def wait(self, seen: int, timeout: float) -> int:
        """Return the version once it differs from `seen`, or after `timeout` seconds."""
        if self.version != seen:
            return self.version
        if self._event is None:
            self._event = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        return self.version
