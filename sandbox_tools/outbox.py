"""Progress events and transcript checkpoints, sent in the background, in order.

A tool call should cost the permission round trip and the tool, nothing else,
so the loop never waits for the broker to record progress: `Outbox.event` and
`Outbox.checkpoint` queue the document and return. One sender thread with its
own broker connection sends the queue in order (consecutive events go as one
`EventBatch`), so the host sees events and checkpoints exactly in the order
they happened. `flush` waits until everything queued has been sent; the runner
calls it before the result is posted and before it exits, on every path, so
nothing queued is lost while the broker is there to take it.

A refusal (the broker's flood limits, say) is logged and the sender goes on:
progress is best effort, as it was when it was sent in line. The thread sleeps
on a condition variable while the queue is empty: an idle runner uses no CPU.
"""

from __future__ import annotations

import logging
import threading
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
        self._thread = threading.Thread(target=self._run, name="warden-outbox", daemon=True)
        self._thread.start()

    def event(self, event: wire.EventRequest) -> None:
        self._put(_Queued(event=event))

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

    def _put(self, queued: _Queued) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the outbox is closed")
            self._queue.append(queued)
            self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything queued so far is sent (or refused); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)

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
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
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
