"""Progress events and transcript checkpoints, sent in the background, in order.

A tool call should cost the permission round trip and the tool, nothing else,
so the loop never waits for the broker to record progress: `Outbox.event` and
`Outbox.checkpoint` queue the document and return. One sender thread with its
own broker connection sends the queue in order (consecutive events go as one
`EventBatch`), so the host sees events and checkpoints exactly in the order
they happened. `flush` waits until everything queued has been sent; the runner
calls it before the result is posted and before it exits, on every path, so
nothing queued is lost while the broker is there to take it.

A tool's progress is held back a little (`event(..., hold_s=...)`): the loop's next
permission request takes what is held (`take_events`) and carries it, so a quick
tool costs the host no request of its own and no send competes with the next
call's permission round trip or the tool's own start-up. What nothing takes goes
when the first held document's hold ends (one send per hold at most, however many
calls it covers). Anything not held, a checkpoint, `flush` and `close` send what
is queued at once. So if the sandbox is killed outright (no `flush`), what is lost
is only what was held: the progress of the calls of the last hold (at most
`hold_s`) that no request carried yet; the calls' decisions are in the host's
audit trail either way.

A refusal (the broker's flood limits, say) is logged and the sender goes on:
progress is best effort, as it was when it was sent in line. The thread sleeps
on a condition variable while the queue is empty, and is woken only when it must
send sooner than it planned: an idle runner uses no CPU, a busy one wakes it at
most once per hold.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from sandbox_tools import wire
from sandbox_tools.errors import BrokerRequestError, BrokerUnavailableError

log = logging.getLogger("sandbox_tools")


class _Queued(NamedTuple):
    """One queued document: an event or a checkpoint."""

    event: wire.EventRequest | None = None
    checkpoint: wire.TranscriptCheckpoint | None = None


class Outbox:
    """The ordered background channel for events and checkpoints."""

    def __init__(
        self,
        send_events: Callable[[wire.EventBatch], None],
        send_checkpoint: Callable[[wire.TranscriptCheckpoint], None],
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self._send_events = send_events
        self._send_checkpoint = send_checkpoint
        self._close = close
        self._queue: deque[_Queued] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._flushing = 0
        self._release_at: float | None = None
        """Monotonic time the queue's held documents go; None: what is queued goes now."""
        self._wakes_at: float | None = None
        """When the sender, waiting for a hold to end, wakes by itself; None: it waits
        to be woken (idle) or is not waiting."""
        self._thread = threading.Thread(target=self._run, name="warden-outbox", daemon=True)
        self._thread.start()

    def event(self, event: wire.EventRequest, *, hold_s: float = 0.0) -> None:
        """Queue an event; `hold_s`: it may wait that long for the next document, to go
        with it in one batch (anything queued without a hold sends both at once)."""
        self._put(_Queued(event=event), hold_s)

    def checkpoint(self, checkpoint: wire.TranscriptCheckpoint) -> None:
        """Queue a checkpoint; the message list is copied, so later turns do not
        change what this one says."""
        self._put(
            _Queued(
                checkpoint=wire.transcript_checkpoint(
                    list(checkpoint["messages"]), checkpoint["turn"]
                )
            )
        )

    def take_events(self, limit: int = wire.MAX_EVENTS_PER_BATCH) -> list[wire.EventRequest]:
        """Everything queued, for a request about to go on another connection to carry,
        when that keeps the order: only events are queued (no checkpoint), at most
        `limit`, and nothing is being sent. Otherwise [] (the sender sends them)."""
        with self._cond:
            queue = self._queue
            if self._busy or not queue or len(queue) > limit:
                return []
            if any(q.event is None for q in queue):
                return []
            taken = [q.event for q in queue if q.event is not None]
            queue.clear()
            self._release_at = None
            if self._flushing:
                self._cond.notify_all()
            return taken

    def _put(self, queued: _Queued, hold_s: float = 0.0) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the outbox is closed")
            if hold_s <= 0:
                self._release_at = None
            elif not self._queue:  # else: it goes when what is already queued goes
                self._release_at = time.monotonic() + hold_s
            self._queue.append(queued)
            wakes_at, release_at = self._wakes_at, self._release_at
            # A sender already waking by the time this must go need not be woken now.
            if release_at is None or wakes_at is None or wakes_at > release_at:
                self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything queued so far is sent (or refused), held documents
        included; False on timeout."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender thread and close its connection."""
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _next(self) -> list[_Queued] | None:
        """The next thing to send: one checkpoint, or a batch of consecutive events."""
        with self._cond:
            while True:
                if not self._queue:
                    if self._closed:
                        return None
                    self._wakes_at = None
                    self._cond.wait()
                    continue
                release_at = self._release_at
                if release_at is None or self._flushing or self._closed:
                    break
                wait_s = release_at - time.monotonic()
                if wait_s <= 0:
                    break
                self._wakes_at = release_at
                self._cond.wait(wait_s)
            self._wakes_at = None
            self._release_at = None
            self._busy = True
            first = self._queue.popleft()
            taken = [first]
            while (
                first.event is not None
                and self._queue
                and self._queue[0].event is not None
                and len(taken) < wire.MAX_EVENTS_PER_BATCH
            ):
                taken.append(self._queue.popleft())
            return taken

    def _run(self) -> None:
        try:
            while (taken := self._next()) is not None:
                try:
                    self._send(taken)
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
        finally:
            self._close()

    def _send(self, taken: list[_Queued]) -> None:
        checkpoint = taken[0].checkpoint
        try:
            if checkpoint is not None:
                self._send_checkpoint(checkpoint)
            else:
                self._send_events(wire.event_batch([q.event for q in taken if q.event is not None]))
        except BrokerRequestError as e:
            what = (
                f"transcript checkpoint after turn {checkpoint['turn']}"
                if checkpoint is not None
                else (f"{len(taken)} events")
            )
            log.warning("%s was refused: %s", what, e)
        except BrokerUnavailableError as e:
            log.warning("could not send progress to the broker: %s", e)
        except Exception:
            log.exception("bug while sending progress to the broker")
