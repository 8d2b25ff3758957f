"""The kernel's exit records are read and attributed to the sandbox they came from:
a child reaped by the kernel is counted through its parent, a chain of exited
parents is followed when its records arrive, other processes are ignored, and a
live thread is counted once (its own counter, not while it is exiting)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.backend import exits
from orchestrator.backend.exits import ExitRecords, cgroup_of, parse_exit

MIB = 1024 * 1024
CGROUP = "/docker/abc123"


def record(pid: int, ppid: int, written: int) -> bytes:
    """One TASKSTATS_CMD_NEW message as the kernel sends it (one thread's exit)."""
    stats = bytearray(exits.MIN_STATS_LEN + 152)
    struct.pack_into("II", stats, exits.OFF_PID, pid, ppid)
    struct.pack_into("Q", stats, exits.OFF_WRITE_BYTES, written)
    inner = exits._attr(exits.TASKSTATS_TYPE_PID, struct.pack("I", pid))
    inner += exits._attr(exits.TASKSTATS_TYPE_STATS, bytes(stats))
    body = struct.pack("BBH", 2, 1, 0) + exits._attr(exits.TASKSTATS_TYPE_AGGR_PID, inner)
    return struct.pack("IHHII", 16 + len(body), 31, 0, 0, 0) + body


def fake_proc(root: Path, cgroups: dict[int, str]) -> Path:
    for pid, path in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(f"9:name=systemd:/\n8:pids:{path}\n0::/\n")
    return root


def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, "the reader did not get there"
        time.sleep(0.01)


@pytest.fixture
def kernel() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.settimeout(0.05)  # the reader wakes often enough to see close()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_parse_reads_pid_parent_and_bytes() -> None:
    assert parse_exit(record(4242, 17, 3 * MIB)[16:]) == (4242, 17, 3 * MIB)
    assert parse_exit(struct.pack("BBH", 2, 1, 0)) is None


def test_cgroup_of_prefers_the_pids_hierarchy(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {7: CGROUP})
    assert cgroup_of(7, proc) == CGROUP
    (proc / "8").mkdir()
    (proc / "8" / "cgroup").write_text("0::/system.slice/docker-x.scope\n")
    assert cgroup_of(8, proc) == "/system.slice/docker-x.scope"
    assert cgroup_of(9, proc) is None


def test_a_child_reaped_by_the_kernel_counts_through_its_live_parent(
    tmp_path: Path, kernel: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = kernel
    records = ExitRecords(fake_proc(tmp_path, {100: CGROUP, 900: "/"}), sock=ours)
    tally = records.watch(CGROUP)
    theirs.send(record(101, 100, 4 * MIB))  # parent 100 lives in the sandbox
    theirs.send(record(901, 900, 7 * MIB))  # a host process: not the sandbox's
    until(lambda: records.exited_bytes(tally) == 4 * MIB)
    theirs.send(record(102, 101, MIB))  # child of an exited member
    until(lambda: records.exited_bytes(tally) == 5 * MIB)
    records.unwatch(tally)
    records.close()


def test_a_chain_of_exited_parents_is_followed_when_its_records_arrive(
    tmp_path: Path, kernel: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = kernel
    records = ExitRecords(fake_proc(tmp_path, {300: CGROUP}), sock=ours)
    tally = records.watch(CGROUP)
    theirs.send(record(500, 400, 2 * MIB))  # 400 already gone, its record not yet read
    time.sleep(0.2)
    assert records.exited_bytes(tally) == 0
    theirs.send(record(400, 300, 0))  # 400 wrote nothing; its parent lives in the sandbox
    until(lambda: records.exited_bytes(tally) == 2 * MIB)
    assert records.unattributed_bytes == 0
    records.close()


def test_a_live_thread_counts_its_own_bytes_unless_exiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    tid = os.getpid()
    assert exits._own_written(tid) >= 0
    base = tmp_path / str(tid) / "task" / str(tid)
    base.mkdir(parents=True)
    (base / "io").write_text("rchar: 5\nwrite_bytes: 8192\n")
    (base / "stat").write_text(f"{tid} (a) b) c) S 1 1 1 0 -1 4194560 0 0\n")
    real = Path

    def fake_path(text: str) -> Path:
        return tmp_path / text.removeprefix("/proc/") if text.startswith("/proc/") else real(text)

    monkeypatch.setattr(exits, "Path", fake_path)
    assert exits._own_written(tid) == 8192  # a ')' in the command name is fine
    (base / "stat").write_text(f"{tid} (a) S 1 1 1 0 -1 {4194560 | exits.PF_EXITING} 0 0\n")
    assert exits._own_written(tid) == 0  # its exit record counts it


def test_exits_before_the_sandbox_is_watched_are_counted_when_it_is(
    tmp_path: Path, kernel: tuple[socket.socket, socket.socket]
) -> None:
    """The watcher starts after the engine's start: a writer that already ended
    (waited for by a live shell of the sandbox) still counts."""
    ours, theirs = kernel
    records = ExitRecords(fake_proc(tmp_path, {200: CGROUP, 900: "/"}), sock=ours)
    theirs.send(record(201, 200, 20 * MIB))  # dd ended; its shell 200 lives on
    theirs.send(record(901, 900, 5 * MIB))  # a host process
    until(lambda: len(records._backlog) == 2)
    tally = records.watch(CGROUP)
    assert records.exited_bytes(tally) == 20 * MIB
    records.close()
