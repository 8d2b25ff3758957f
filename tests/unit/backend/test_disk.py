"""The disk guard's logic without Docker: bytes written are summed over the
container's processes (zombies included) and never over another PID namespace's,
crossing the write cap or the free-space floor kills once with a message naming the
limit and how to change it, the wrapped backend reports `disk_limit`, and the limits
come from settings, CLI and agent files (which may only lower the cap)."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.backend import disk
from orchestrator.backend.contract import DiskLimits, ResourceLimits, SandboxSpec, SandboxStatus
from orchestrator.backend.disk import DiskGuardedBackend, DiskWatch, ProcessTreeMeter
from orchestrator.backend.fake import FakeBackend, FakeOutcome
from orchestrator.commands.exec import EXIT_DISK_LIMIT, exit_status
from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.runtime.sandbox import agent_disk_limits
from orchestrator.store import Store, TaskRecord

MIB = 1024 * 1024


def fake_proc(root: Path, ns: str, counters: dict[int, int]) -> Path:
    """A /proc with one container init (host PID 4242) whose namespace holds `counters`."""
    init = root / "4242"
    (init / "ns").mkdir(parents=True)
    (init / "ns" / "pid").symlink_to(ns)
    inner = init / "root" / "proc"
    inner.mkdir(parents=True)
    (inner / "self").mkdir()  # not a PID: ignored
    for pid, written in counters.items():
        (inner / str(pid)).mkdir()
        (inner / str(pid) / "io").write_text(
            f"rchar: 1\nwchar: 999999\nwrite_bytes: {written}\ncancelled_write_bytes: 0\n"
        )
    return root


def test_meter_sums_every_process_of_the_namespace(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "pid:[4026531]", {1: 16384, 8: 5 * MIB, 9: 3 * MIB})
    meter = ProcessTreeMeter(4242, proc=proc)
    assert meter.written() == 16384 + 8 * MIB  # write_bytes, not wchar
    (proc / "4242" / "root" / "proc" / "9" / "io").unlink()  # reaped between list and read
    assert meter.written() == 16384 + 5 * MIB


def test_meter_stops_when_the_pid_belongs_to_another_namespace(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "pid:[4026531]", {1: MIB})
    meter = ProcessTreeMeter(4242, proc=proc)
    link = proc / "4242" / "ns" / "pid"
    link.unlink()
    link.symlink_to("pid:[4026999]")  # the init died and a host process got its PID
    assert meter.written() is None


class _Meter:
    def __init__(self, values: list[int | None]) -> None:
        self.values = values

    def written(self) -> int | None:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]

    def close(self) -> None:
        pass


def watch(limits: DiskLimits, meter: _Meter | None, workspace: Path | None = None) -> DiskWatch:
    return DiskWatch(
        limits=limits,
        workspace=workspace,
        meter=meter,  # type: ignore[arg-type]
        kill=lambda: None,
    )


def test_write_cap_uses_the_high_water_mark() -> None:
    w = watch(DiskLimits(write_limit_bytes=10 * MIB, free_floor_bytes=0), _Meter([9 * MIB, 0]))
    assert w.check() is None and w.check() is None  # a dip (reaping race) never lowers it
    assert w.written == 9 * MIB
    w.meter = _Meter([10 * MIB])  # type: ignore[assignment]
    breach = w.check()
    assert breach is not None and breach.limit == "write_limit"
    assert "wrote 10.0 MiB, reaching its write limit of 10.0 MiB" in breach.message
    assert "--disk-write-limit" in breach.message and "WARDEN_DISK_WRITE_LIMIT" in breach.message


def test_a_gone_container_is_no_longer_measured() -> None:
    w = watch(DiskLimits(write_limit_bytes=MIB, free_floor_bytes=0), _Meter([None]))
    assert w.check() is None and w.meter is None


def test_free_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk, "free_space", lambda path: (900 * MIB, 10**6))
    w = watch(DiskLimits(write_limit_bytes=0, free_floor_bytes=GIB), None, tmp_path)
    breach = w.check()
    assert breach is not None and breach.limit == "free_floor"
    assert f"({tmp_path}) fell to 900.0 MiB, below the floor of 1.0 GiB" in breach.message
    assert "--disk-free-floor" in breach.message
    off = watch(DiskLimits(write_limit_bytes=0, free_floor_bytes=0), None, tmp_path)
    assert off.check() is None


def test_free_inode_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    free: list[tuple[int, int | None]] = [(100 * GIB, 9_999)]
    monkeypatch.setattr(disk, "free_space", lambda path: free[0])
    w = watch(DiskLimits(write_limit_bytes=0, free_floor_bytes=GIB), None, tmp_path)
    breach = w.check()
    assert breach is not None and breach.limit == "inode_floor"
    assert f"free inodes on the workspace's file system ({tmp_path}) fell to 9999, " in (
        breach.message
    )
    assert "below the floor of 10000" in breach.message
    assert "WARDEN_DISK_FREE_INODES" in breach.message
    free[0] = (100 * GIB, None)  # a file system that counts no inodes
    assert w.check() is None
    off = watch(DiskLimits(free_inode_floor=0), None, tmp_path)
    free[0] = (100 * GIB, 0)
    assert off.check() is None


def test_free_space_reads_bytes_and_inodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Stat:
        f_bavail, f_frsize, f_files, f_favail = 10, 4096, 100, 7

    monkeypatch.setattr(disk.os, "statvfs", lambda path: Stat())
    assert disk.free_space(tmp_path) == (40960, 7)
    Stat.f_files = 0  # btrfs and friends count no inodes
    assert disk.free_space(tmp_path) == (40960, None)


GIB = 1024 * MIB


def spec(tmp_path: Path, limits: DiskLimits) -> SandboxSpec:
    from orchestrator import labels

    return SandboxSpec(
        image="img",
        command=["sleep", "30"],
        workspace=tmp_path,
        warden_labels=labels.warden_labels("test-disk", task="t"),
        limits=ResourceLimits(disk=limits),
    )


def test_guarded_backend_kills_once_and_reports_disk_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    free = [5 * GIB]
    monkeypatch.setattr(disk, "free_space", lambda path: (free[0], 10**6))
    inner = FakeBackend(responder=lambda s: FakeOutcome(run_s=float("inf")))
    kills: list[str] = []
    real_kill = inner.kill

    def counting_kill(container_id: str) -> None:
        kills.append(container_id)
        real_kill(container_id)

    monkeypatch.setattr(inner, "kill", counting_kill)
    backend = DiskGuardedBackend(inner, poll_s=0.01)
    container = backend.start(spec(tmp_path, DiskLimits(free_floor_bytes=GIB)))
    time.sleep(0.05)
    free[0] = GIB - 1
    result = backend.wait(container, timeout_s=10)
    backend.remove(container)
    assert result.status is SandboxStatus.DISK_LIMIT
    assert "below the floor of 1.0 GiB" in result.reason
    assert kills == [container]
    assert exit_status(result) == EXIT_DISK_LIMIT == 122


def test_guarded_backend_leaves_other_endings_alone(tmp_path: Path) -> None:
    backend = DiskGuardedBackend(FakeBackend(), poll_s=0.01)
    result = backend.run(replace(spec(tmp_path, DiskLimits()), command=["true"]))
    assert (result.status, result.reason) == (SandboxStatus.OK, "")
    assert backend._watches == {}  # the watcher ended with its sandbox


def test_limits_from_settings_and_cli() -> None:
    settings = Settings.from_env({"WARDEN_DISK_WRITE_LIMIT": "500m", "WARDEN_DISK_FREE_FLOOR": "0"})
    assert DiskLimits.from_settings(settings) == DiskLimits(
        write_limit_bytes=500 * MIB, free_floor_bytes=0
    )
    assert DiskLimits.from_settings(settings, MIB, None).write_limit_bytes == MIB
    inodes = DiskLimits.from_settings(Settings.from_env({"WARDEN_DISK_FREE_INODES": "500"}))
    assert inodes.free_inode_floor == 500
    with pytest.raises(ConfigError, match="WARDEN_DISK_FREE_INODES"):
        Settings.from_env({"WARDEN_DISK_FREE_INODES": "many"})
    with pytest.raises(ConfigError, match="WARDEN_DISK_FREE_FLOOR='lots' is not a size"):
        Settings.from_env({"WARDEN_DISK_FREE_FLOOR": "lots"})


def test_exec_flags_accept_zero_and_reject_nonsense() -> None:
    from orchestrator.commands.exec import exec_command

    bad = CliRunner().invoke(exec_command, ["--disk-write-limit", "-5", "--", "true"])
    assert bad.exit_code == 2 and "--disk-write-limit" in bad.output


class _Agent:
    def __init__(self, cap: int | None) -> None:
        self.disk_write_limit = cap


def test_an_agent_file_may_lower_the_cap_but_never_raise_it() -> None:
    run = DiskLimits(write_limit_bytes=GIB)
    assert agent_disk_limits(run, _Agent(None)) == run
    assert agent_disk_limits(run, _Agent(100 * MIB)).write_limit_bytes == 100 * MIB
    assert agent_disk_limits(run, _Agent(10 * GIB)).write_limit_bytes == GIB
    uncapped = DiskLimits(write_limit_bytes=0)
    assert agent_disk_limits(uncapped, _Agent(100 * MIB)).write_limit_bytes == 100 * MIB


def test_agent_file_key(tmp_path: Path) -> None:
    from orchestrator.agents.files import load_agent_file

    path = tmp_path / "w.md"
    path.write_text("---\nname: w\ndescription: d\ndiskWriteLimit: 300m\n---\nbody\n")
    agent, _ = load_agent_file(path)
    assert agent.disk_write_limit == 300 * MIB


def test_a_v1_store_learns_the_disk_limit_status(tmp_path: Path) -> None:
    from orchestrator.store import schema

    path = tmp_path / "warden.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in schema._MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
    conn.execute("PRAGMA user_version=1")
    conn.close()
    with Store.open(path) as store:
        store.create_run("r", prompt="p", workspace="/w", model="m", pid=os.getpid())
        store.create_task(TaskRecord(task_id="sa_1", run_id="r", agent_type="a", prompt="p"))
        store.update_task("sa_1", status="disk_limit")
        assert store.get_task("sa_1").status == "disk_limit"
    with pytest.raises(sqlite3.IntegrityError):  # the check still holds for the rest
        sqlite3.connect(path).execute("UPDATE tasks SET status = 'bogus'")


def test_a_failing_pid_lookup_still_returns_the_container(tmp_path: Path) -> None:
    class NoPid(FakeBackend):
        def host_pid(self, container_id: str) -> int | None:
            raise OSError("engine went away")

    backend = DiskGuardedBackend(NoPid(), poll_s=0.01)
    container = backend.start(spec(tmp_path, DiskLimits(free_floor_bytes=0)))
    watch = backend._watches[container]
    deadline = time.monotonic() + 10
    while watch.samples == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watch.samples > 0 and watch.meter is None  # per-file limit and floor only
    backend.kill(container)
    backend.wait(container, timeout_s=10)
    backend.remove(container)


def test_start_does_not_wait_for_the_pid_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding the sandbox's processes takes an engine round trip (inspect); it happens
    in the watcher's thread, not on the path that starts the sandbox."""
    monkeypatch.setattr(disk, "_exited", lambda pid: False)  # this process stands in for init
    looked_up = threading.Event()
    release = threading.Event()

    class SlowPid(FakeBackend):
        def host_pid(self, container_id: str) -> int | None:
            looked_up.set()
            release.wait(10)
            return os.getpid()  # some live process: the meter binds to its namespace

    backend = DiskGuardedBackend(SlowPid(), poll_s=0.01)
    container = backend.start(spec(tmp_path, DiskLimits(free_floor_bytes=0)))
    assert looked_up.wait(10)
    watch = backend._watches[container]
    assert watch.meter is None  # start returned while the lookup was still waiting
    release.set()
    deadline = time.monotonic() + 10
    while watch.meter is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(watch.meter, ProcessTreeMeter)
    backend.kill(container)
    backend.wait(container, timeout_s=10)
    backend.remove(container)


def test_a_sandbox_that_ended_before_its_meter_was_made_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The meter is made in the watcher's thread: a command as short as `true` may be
    gone by then. That is no reason to warn the user; there is nothing left to count."""
    gone = subprocess.Popen(["true"])  # its PID no longer exists once reaped
    gone.wait()

    class Ended(FakeBackend):
        def host_pid(self, container_id: str) -> int | None:
            return gone.pid

    backend = DiskGuardedBackend(Ended(), poll_s=0.01)
    with caplog.at_level(logging.WARNING, logger="warden.disk"):
        container = backend.start(spec(tmp_path, DiskLimits(free_floor_bytes=0)))
        watch = backend._watches[container]
        deadline = time.monotonic() + 10
        while watch.samples == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        backend.kill(container)
        backend.wait(container, timeout_s=10)
        backend.remove(container)
    assert watch.meter is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


class GappyRecords:
    """An exit-record listener whose misses the test sets."""

    def __init__(self) -> None:
        self.dropped, self.unattributed = 0, 0

    def gaps(self) -> tuple[int, int]:
        return self.dropped, self.unattributed


def test_what_the_meter_missed_while_a_sandbox_ran_is_said_on_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    records = GappyRecords()
    records.dropped, records.unattributed = 1, 7 * MIB  # before: not this sandbox's
    monkeypatch.setattr(disk.exits.ExitRecords, "shared", classmethod(lambda cls: records))
    inner = FakeBackend(responder=lambda s: FakeOutcome(run_s=float("inf")))
    backend = DiskGuardedBackend(inner, poll_s=0.01)
    first = backend.start(spec(tmp_path, DiskLimits()))
    second = backend.start(spec(tmp_path, DiskLimits()))
    records.dropped, records.unattributed = 3, 7 * MIB + 3 * MIB  # while both ran
    caplog.set_level(logging.WARNING)
    gaps = []
    for container in (first, second):
        inner.kill(container)
        gaps.append(backend.wait(container, timeout_s=10).meter_gap)
        backend.remove(container)
    gap = gaps[0]
    assert "dropped exit records 2 time(s)" in gap and "3.0 MiB written by processes" in gap
    assert "disk write limit may have been crossed unseen" in gap
    assert gap in caplog.text
    assert gaps[1] == gap  # each sandbox that ran through the misses says so
    # One that ran through none says nothing.
    fresh = backend.start(spec(tmp_path, DiskLimits()))
    inner.kill(fresh)
    assert backend.wait(fresh, timeout_s=10).meter_gap == ""
    backend.remove(fresh)


def test_the_free_floor_is_still_read_once_the_workspace_is_renamed_or_removed(
    tmp_path: Path,
) -> None:
    # The watcher holds the workspace by a descriptor: a rename or removal under a
    # running sandbox neither stops the floor's checks nor raises (it printed three
    # FileNotFoundError tracebacks and stopped enforcing).
    workspace = tmp_path / "ws"
    workspace.mkdir()
    w = watch(DiskLimits(write_limit_bytes=0, free_floor_bytes=2**62), None, workspace)
    workspace.rename(tmp_path / "moved")
    first = w.check()
    assert first is not None and first.limit == "free_floor"
    (tmp_path / "moved").rmdir()
    again = w.check()
    assert again is not None and again.limit == "free_floor"
    w.stop()
