"""Locks in how run events are written: a container's progress (`record_for`) is queued
and never waited for, queued events reach the JSONL file and the store in the order
they were made, batched into one store transaction, before any later `emit` returns;
a write that fails stops the run (`on_failure`) and the next `emit` raises."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.errors import StoreError
from orchestrator.runtime.events import EventLog
from orchestrator.store import Store, TaskRecord


@dataclass(frozen=True)
class _Task:
    task_id: str = "sa_t1"
    parent_id: str | None = None
    agent_type: str = "general-purpose"
    trace_id: str | None = None


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "warden.db")
    s.create_run("r1", prompt="p", workspace="/w", model="m", pid=os.getpid())
    s.create_task(TaskRecord(task_id="sa_t1", run_id="r1", agent_type="general-purpose",
                             prompt="p"))  # fmt: skip
    return s


def test_progress_is_not_waited_for_and_lands_in_order_before_the_next_emit(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog("r1", tmp_path / "events.jsonl", store)
    release = threading.Event()
    batches: list[int] = []
    real = store.append_events

    def slow(run_id: str, events: list[tuple[str | None, str, dict[str, object]]]) -> list[int]:
        release.wait(10)  # a slow disk: the first batch is still being written
        batches.append(len(events))
        return real(run_id, events)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append_events", slow)

    async def main() -> None:
        for n in range(30):
            log.record_for("task_running", _Task(), n=n)  # returns at once
        assert batches == []  # nothing written yet, and nobody waited for it
        finished = asyncio.create_task(log.emit_for("task_completed", _Task()))
        await asyncio.sleep(0.05)
        assert not finished.done()  # an emit returns only once everything before it is written
        release.set()
        await finished

    asyncio.run(main())
    stored = store.events(run_id="r1")
    kinds = [e.kind for e in stored]
    numbers = [e.data["data"]["n"] for e in stored[:30]]  # type: ignore[call-overload,index]
    assert kinds == ["task_running"] * 30 + ["task_completed"]
    assert numbers == list(range(30))
    assert len(batches) < 31  # batched: not one transaction per event
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == kinds


def test_a_failed_queued_write_stops_the_run_and_the_next_emit_raises(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped: list[StoreError] = []
    log = EventLog("r1", tmp_path / "events.jsonl", store, on_failure=[stopped.append])

    def full(run_id: str, events: object) -> list[int]:
        raise StoreError("the disk is full; free space on it")

    monkeypatch.setattr(store, "append_events", full)

    async def main() -> None:
        log.record_for("task_running", _Task(), event="tool_started")
        await log.flush()
        assert len(stopped) == 1 and log.failure is stopped[0]
        with pytest.raises(StoreError, match="free space"):
            await log.emit_for("task_completed", _Task())

    asyncio.run(main())


async def test_a_late_subscriber_sees_events_from_then_until_it_unsubscribes(
    tmp_path: Path,
) -> None:
    built_with: list[str] = []
    log = EventLog("r1", tmp_path / "events.jsonl", listeners=[lambda e: built_with.append(e.kind)])
    await log.emit("run_started")
    late: list[str] = []
    unsubscribe = log.subscribe(lambda e: late.append(e.kind))
    await log.emit("task_started")
    log.record_for("tool_started", _Task())
    await log.flush()
    log.record_for("tool_finished", _Task())  # queued, not yet written
    unsubscribe()
    unsubscribe()  # twice is harmless
    await log.emit("task_completed")
    assert late == ["task_started", "tool_started"]  # nothing after unsubscribe returned
    assert built_with == [
        "run_started",
        "task_started",
        "tool_started",
        "tool_finished",
        "task_completed",
    ]


async def test_listeners_hear_events_in_the_files_order_and_only_once_written(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host decision (`emit`, waited for) queued just before a container's progress
    (`record_for`, not waited for): a `--json` reader must see them as the file has them,
    never the progress first because it skipped the write."""
    heard: list[str] = []
    log = EventLog(
        "r1", tmp_path / "events.jsonl", store, listeners=[lambda e: heard.append(e.kind)]
    )
    release = threading.Event()
    real = store.append_events

    def slow(run_id: str, events: list[tuple[str | None, str, dict[str, object]]]) -> list[int]:
        release.wait(10)
        return real(run_id, events)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append_events", slow)
    denied = asyncio.create_task(log.emit_for("permission_denied", _Task()))
    await asyncio.sleep(0)  # the decision is queued and its write has begun
    log.record_for("task_running", _Task(), event="turn_finished")
    assert heard == []  # nothing is told before it is on disk
    release.set()
    await denied
    await log.flush()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert heard == [json.loads(line)["kind"] for line in lines]
    assert heard == ["permission_denied", "task_running"]


async def test_a_failed_write_tells_no_listener(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: list[str] = []
    log = EventLog(
        "r1", tmp_path / "events.jsonl", store, listeners=[lambda e: heard.append(e.kind)]
    )

    def full(run_id: str, events: object) -> list[int]:
        raise StoreError("the disk is full; free space on it")

    monkeypatch.setattr(store, "append_events", full)
    log.record_for("task_running", _Task())
    with pytest.raises(StoreError):
        await log.emit_for("task_completed", _Task())
    assert heard == []
