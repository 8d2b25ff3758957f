"""Locks in crash recovery without Docker: owner identities prove death only when they
can (reused pid, new boot, gone pid; never another host), dead owners' runs and the
live tasks under already-ended runs become `interrupted`, a damaged store is refused
at open, a failed event write is one clear StoreError that stops the run, and the
runner's watchdog and the warm hold socket react to the host going away."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import labels as wl
from orchestrator import owner
from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.fake import FakeBackend
from orchestrator.errors import StoreError
from orchestrator.lifecycle.recovery import reap_dead, recover
from orchestrator.runtime.events import EventLog
from orchestrator.runtime.pool import Hold
from orchestrator.store import Store, TaskRecord
from sandbox_tools import watchdog, wire


def dead_owner(state: str = "st_x") -> owner.Owner:
    child = subprocess.Popen(["sleep", "0"])
    start = owner.process_start(child.pid) or 1
    child.wait()
    return owner.Owner(owner.host_id(), owner.boot_id(), child.pid, start, state)


def test_owner_identity_proves_death_only_when_it_can(tmp_path: Path) -> None:
    me = owner.current(tmp_path)
    assert me.state == owner.current(tmp_path).state  # stable: stored in the state dir
    assert me.start == owner.process_start(os.getpid())
    assert not owner.is_dead(me)
    assert owner.is_dead(dead_owner())
    assert owner.is_dead(owner.Owner(me.host, me.boot, me.pid, me.start + 1, me.state))
    assert owner.is_dead(owner.Owner(me.host, "an-older-boot", me.pid, me.start, me.state))
    elsewhere = owner.Owner("other-machine/4026531836", "b", 1, 1, me.state)
    assert not owner.is_dead(elsewhere)  # nothing here can check it: alive
    assert owner.Owner.from_labels(me.labels()) == me
    assert owner.Owner.from_json(me.to_json()) == me
    assert owner.Owner.from_json("{not json") is None and owner.Owner.from_labels({}) is None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "state" / "warden.db") as s:
        yield s


def _task(task_id: str, run_id: str) -> TaskRecord:
    return TaskRecord(task_id=task_id, run_id=run_id, agent_type="bash", prompt="p")


def test_dead_owners_runs_and_tasks_under_ended_runs_are_interrupted(store: Store) -> None:
    dead = dead_owner().to_json()
    alive = owner.current(store.path.parent).to_json()
    for run_id, run_owner in (("crashed", dead), ("failed-run", dead), ("live", alive)):
        store.create_run(run_id, prompt="p", workspace="/w", model="m", pid=1, owner=run_owner)
        store.create_task(_task(f"sa_{run_id.replace('-', '_')}", run_id))
        store.update_task(f"sa_{run_id.replace('-', '_')}", status="running")
    store.finish_run("failed-run", "failed", "disk full")  # its task was never finished
    found = reap_dead(store)
    assert found.runs == ["crashed"]
    assert sorted(found.tasks) == ["sa_crashed", "sa_failed_run"]
    assert store.get_run("crashed").status == "interrupted"
    assert store.get_run("failed-run").status == "failed"
    assert store.get_task("sa_failed_run").status == "interrupted"
    assert store.get_run("live").status == "running"
    assert store.get_task("sa_live").status == "running"
    assert reap_dead(store).tasks == []  # idempotent


def test_recovery_removes_dead_owners_containers_even_after_a_read_only_reap(
    store: Store,
) -> None:
    # `warden ps` (store only) notices the dead run first; the next run's recovery
    # must still remove its containers, and only those of dead owners.
    backend = FakeBackend()
    me = owner.current(store.path.parent)

    def sandbox(run_id: str, who: owner.Owner) -> str:
        spec = SandboxSpec(
            image="img",
            command=["true"],
            warden_labels={**wl.warden_labels(f"s-{run_id}", run=run_id), **who.labels()},
        )
        return backend.start(spec)

    store.create_run(
        "crashed", prompt="p", workspace="/w", model="m", pid=1, owner=dead_owner().to_json()
    )
    dead_box = sandbox("crashed", dead_owner())
    live_box = sandbox("live", me)
    assert reap_dead(store).runs == ["crashed"]  # e.g. by `warden ps`
    found = recover(store, backend)
    assert found.runs == [] and found.containers == 1
    remaining = [info.id for info in backend.list({wl.SESSION: None})]
    assert remaining == [live_box] and dead_box not in remaining


def test_a_damaged_index_page_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state" / "warden.db"
    with Store.open(path) as s:
        s.create_run("r", prompt="p", workspace="/w", model="m", pid=1)
        for i in range(300):
            s.create_task(_task(f"sa_{i:04d}", "r"))
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tasks_status'")
    page = root.fetchone()[0]
    conn.close()
    with path.open("r+b") as fh:  # wreck one index page; page 1 (the schema) is intact
        fh.seek((page - 1) * 4096 + 8)
        fh.write(b"\xff" * 64)
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert str(path) in str(info.value) and "Move it aside" in str(info.value)


async def test_event_log_failure_is_one_store_error_and_stops_the_run(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r" / "events.jsonl"
    seen: list[StoreError] = []
    log = EventLog("r", path, on_failure=[seen.append])
    path.unlink()
    path.mkdir()  # the events file replaced by a directory: it cannot be appended to
    with pytest.raises(StoreError, match="cannot write the run's event log"):
        await log.emit("task_started")
    with pytest.raises(StoreError):
        await log.emit("task_running")
    assert len(seen) == 1 and log.failure is seen[0]
    (tmp_path / "blocked").write_text("a file where a directory should be")
    with pytest.raises(StoreError, match="WARDEN_STATE_DIR"):
        EventLog("r", tmp_path / "blocked" / "r" / "events.jsonl")


def _listen(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    return server


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a Unix socket's path may be at most 107 bytes,
    which tmp_path can pass), removed after the test."""
    directory = Path(tempfile.mkdtemp(prefix="wwd-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 200 OK\r\n\r\n"])
def test_watchdog_kills_tools_and_exits_when_the_broker_goes(
    answer: bytes, short_dir: Path
) -> None:
    directory = str(short_dir)
    server = _listen(f"{directory}/b.sock")
    events: list[object] = []
    done = threading.Event()

    def exit_process(code: int) -> None:
        events.append(code)
        done.set()

    watchdog.start(f"{directory}/b.sock", lambda: events.append("killed"), exit_process)
    conn, _ = server.accept()
    assert wire.ALIVE_PATH.encode() in conn.recv(4096)
    assert not done.wait(0.2), "the watchdog must wait while the broker is there"
    if answer:
        conn.sendall(answer)
    conn.close()  # the orchestrator died (or closed the broker)
    server.close()
    assert done.wait(5)
    assert events == ["killed", watchdog.EXIT_HOST_GONE]


def test_watchdog_ignores_a_broker_without_the_endpoint(short_dir: Path) -> None:
    directory = str(short_dir)
    server = _listen(f"{directory}/b.sock")
    result: list[str | None] = []
    thread = threading.Thread(
        target=lambda: result.append(watchdog.wait_for_close(f"{directory}/b.sock"))
    )
    thread.start()
    conn, _ = server.accept()
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 404 Not Found\r\n\r\n")
    thread.join(5)
    conn.close()
    server.close()
    assert result == [None]


async def _hold_answer(hold_dir: Path) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(hold_dir / "warm.sock"))
    try:
        return await asyncio.wait_for(reader.read(16), 5)
    finally:
        writer.close()


async def test_warm_hold_says_go_or_bye_whenever_the_runner_connects(short_dir: Path) -> None:
    for early in (True, False):
        hold_dir = short_dir / ("early" if early else "late")
        hold_dir.mkdir()
        hold = Hold(hold_dir)
        await hold.open()
        if early:
            hold.release()  # released before the runner finished its imports
            assert await _hold_answer(hold_dir) == wire.WARM_GO
        else:
            waiting = asyncio.create_task(_hold_answer(hold_dir))
            await asyncio.sleep(0.05)
            hold.dismiss()
            assert await waiting == wire.WARM_BYE
        hold.close()
