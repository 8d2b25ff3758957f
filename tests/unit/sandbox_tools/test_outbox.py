"""Locks in the runner's background channel for progress: documents go in the order
they were queued; a held tool start goes in one batch with the end that follows it
within the hold, and on its own when the hold runs out; `flush` and `close` send held
documents at once, so nothing queued is lost when the runner finishes; a request on
the loop's own connection may carry the held events instead (`take_events`), but only
when that cannot put them out of order."""

from __future__ import annotations

import threading

from sandbox_tools import wire
from sandbox_tools.outbox import Outbox

WAIT_S = 30.0
"""Generous: the machine may be loaded; nothing here waits this long when it works."""
LONG_HOLD_S = 600.0
"""A hold no test outlives: whatever is sent under it was sent by something else."""


class _Sent:
    """What the outbox sent, in order: ("events", kinds) or ("checkpoint", turn)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, object]] = []
        self.arrived = threading.Event()

    def events(self, batch: wire.EventBatch) -> None:
        self.items.append(("events", [e["kind"] for e in batch["events"]]))
        self.arrived.set()

    def checkpoint(self, checkpoint: wire.TranscriptCheckpoint) -> None:
        self.items.append(("checkpoint", checkpoint["turn"]))
        self.arrived.set()


def _started() -> wire.EventRequest:
    return wire.event_request("tool_started", "Bash", "toolu_1", "true")


def _finished() -> wire.EventRequest:
    return wire.event_request("tool_finished", "Bash", "toolu_1", "exit code 0")


def test_a_held_start_goes_with_the_end_that_follows_it() -> None:
    sent = _Sent()
    outbox = Outbox(sent.events, sent.checkpoint)
    outbox.event(_started(), hold_s=LONG_HOLD_S)
    outbox.event(_finished())
    assert outbox.flush(WAIT_S)
    assert sent.items == [("events", ["tool_started", "tool_finished"])]
    outbox.close(WAIT_S)


def test_a_held_start_goes_alone_when_its_hold_runs_out() -> None:
    sent = _Sent()
    outbox = Outbox(sent.events, sent.checkpoint)
    outbox.event(_started(), hold_s=0.01)
    assert sent.arrived.wait(WAIT_S)  # no flush: the hold ending sent it
    assert sent.items == [("events", ["tool_started"])]
    outbox.close(WAIT_S)


def test_flush_and_close_send_what_is_held_in_order() -> None:
    sent = _Sent()
    outbox = Outbox(sent.events, sent.checkpoint)
    outbox.event(_started(), hold_s=LONG_HOLD_S)
    assert outbox.flush(WAIT_S)
    outbox.checkpoint(wire.transcript_checkpoint([], 1))
    outbox.event(_started(), hold_s=LONG_HOLD_S)
    outbox.close(WAIT_S)
    assert sent.items == [
        ("events", ["tool_started"]),
        ("checkpoint", 1),
        ("events", ["tool_started"]),
    ]


def test_a_checkpoint_queued_behind_a_held_start_sends_both() -> None:
    sent = _Sent()
    outbox = Outbox(sent.events, sent.checkpoint)
    outbox.event(_started(), hold_s=LONG_HOLD_S)
    outbox.checkpoint(wire.transcript_checkpoint([], 2))
    done = threading.Event()

    def wait_for_both() -> None:
        while len(sent.items) < 2:
            sent.arrived.wait(WAIT_S)
            sent.arrived.clear()
        done.set()

    waiter = threading.Thread(target=wait_for_both, daemon=True)
    waiter.start()
    assert done.wait(WAIT_S)  # without a flush
    assert sent.items == [("events", ["tool_started"]), ("checkpoint", 2)]
    outbox.close(WAIT_S)


def test_held_progress_is_handed_to_the_next_request_and_never_sent_twice() -> None:
    sent = _Sent()
    outbox = Outbox(sent.events, sent.checkpoint)
    outbox.event(_started(), hold_s=LONG_HOLD_S)
    outbox.event(_finished(), hold_s=LONG_HOLD_S)
    taken = outbox.take_events()
    assert [e["kind"] for e in taken] == ["tool_started", "tool_finished"]
    assert outbox.take_events() == []
    outbox.close(WAIT_S)
    assert sent.items == []


def test_progress_queued_behind_a_checkpoint_is_not_taken_out_of_order() -> None:
    sent = _Sent()
    release = threading.Event()

    def slow_checkpoint(checkpoint: wire.TranscriptCheckpoint) -> None:
        release.wait(WAIT_S)
        sent.checkpoint(checkpoint)

    outbox = Outbox(sent.events, slow_checkpoint)
    outbox.event(_started(), hold_s=LONG_HOLD_S)
    outbox.checkpoint(wire.transcript_checkpoint([], 1))
    assert outbox.take_events() == []  # a checkpoint is queued behind the start
    outbox.event(_finished(), hold_s=LONG_HOLD_S)
    assert outbox.take_events() == []  # while one is being sent, or queued
    release.set()
    outbox.close(WAIT_S)
    assert sent.items == [
        ("events", ["tool_started"]),
        ("checkpoint", 1),
        ("events", ["tool_finished"]),
    ]


def test_no_more_than_a_requests_worth_of_progress_is_taken() -> None:
    sent = _Sent()
    outbox = Outbox(sent.events, sent.checkpoint)
    for _ in range(3):
        outbox.event(_started(), hold_s=LONG_HOLD_S)
    assert outbox.take_events(limit=2) == []
    assert len(outbox.take_events(limit=3)) == 3
    outbox.close(WAIT_S)
    assert sent.items == []
