"""Disk limits for running sandboxes: a cap on the bytes one sandbox writes, and a
free-space floor on the workspace's file system. Crossing either kills the sandbox;
its result says `disk_limit` and names the limit and how to change it.

`DiskGuardedBackend` wraps any `ContainerBackend`: `start` also starts a watcher
thread for the container, `wait` stops it and turns a kill it made into
`SandboxStatus.DISK_LIMIT` with the reason. So `TaskManager` and `warden exec`
get the same guard without `if`s of their own.

What is measured, and why (measured on cgroup v1, overlay2, the workspace a bind
mount of the host's ext4):

- **Bytes written: `write_bytes` of every thread that ever ran in the container**
  (`exits.CgroupMeter`): the live threads of its cgroup, each with its own counter,
  plus the kernel's exit record of every thread that ended (`exits.ExitRecords`,
  taskstats). `write_bytes` is charged to the process when it dirties a page
  (buffered writes, `mmap` stores), not at writeback, so it is the writer's, and
  tmpfs (`/tmp`, `/dev/shm`), pipes and sockets do not count. Exit records are what
  make it complete: a reaped child's bytes reach its parent's `/proc/PID/io` only
  when the parent waits for it, so a process that ignores SIGCHLD (or a child that
  lives less than one poll) would otherwise hide them. Without the exit records
  (not root: taskstats needs CAP_NET_ADMIN) `ProcessTreeMeter` is used instead: the
  sum of `/proc/PID/io` over the container's PID namespace (zombies included), which
  such a process can escape; a warning says so. Not chosen: cgroup v1 `blkio`
  accounting (buffered writeback is charged to the root cgroup: 0 bytes for a
  100 MiB `dd` here); `wchar` (counts pipes, sockets and tmpfs); `du` of the
  workspace (slow, and blind to deleted files).
- **Per-file backstop: `RLIMIT_FSIZE`** (docker `ulimits` `fsize`, set by the
  backend from the same cap): no single file can grow past the cap, whatever the
  watcher's timing; the writer gets `EFBIG` / `SIGXFSZ`, and the watcher then sees
  the cap reached and kills the sandbox.
- **Free-space and inode floors: `statvfs` of the workspace** (`f_bavail`,
  `f_favail`), polled with the same thread; they also cover what the byte count
  cannot see (below), and millions of empty files, which use no bytes.

Cost, measured here: one sample of a 7-process sandbox takes ~0.5 ms of CPU
(listing its `/proc`, reading each `io`, one `statvfs`), so ~0.3% of one core per
running sandbox at 5 samples/s; `warden exec true` showed no difference beyond the
noise of a shared machine.

What it does not catch: space used without `write_bytes` (metadata of many
directories) only trips the floors, after the fact (`fallocate`, which would be
the same, is refused in every warden sandbox: `sandbox_tools.seal`, `images.sealing`); the overshoot between two polls
(the write rate times `POLL_S`, spread over files each below the per-file limit);
a sandbox that crosses a limit and exits before the next poll keeps its own status
(a single file at the limit fails with `EFBIG`); killing frees nothing, so the
files stay for the user to review or delete; and with a remote engine, or a host
user who may not read the container's `/proc`, only the per-file backstop and the
floor apply (a warning says so).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from orchestrator.backend import exits
from orchestrator.backend.contract import (
    ContainerBackend,
    ContainerInfo,
    DiskLimits,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)
from orchestrator.values import value

__all__ = ["DiskBreach", "DiskGuardedBackend", "DiskLimits", "DiskWatch", "ProcessTreeMeter"]

log = logging.getLogger("warden.disk")

POLL_S = 0.2
"""How often a watcher samples a running sandbox."""

WRITE_LIMIT_HOW = (
    "raise it with --disk-write-limit SIZE on warden run / warden exec, or "
    "WARDEN_DISK_WRITE_LIMIT (0 disables)"
)
FREE_FLOOR_HOW = (
    "free space on that file system, or lower the floor with --disk-free-floor SIZE on "
    "warden run / warden exec, or WARDEN_DISK_FREE_FLOOR (0 disables)"
)
INODE_FLOOR_HOW = (
    "remove files on that file system (the sandbox may have made many empty ones), or "
    "lower the floor with WARDEN_DISK_FREE_INODES=N (0 disables)"
)


@value
class DiskBreach:
    """A limit a sandbox crossed; `message` is what users and the parent model read.
    (A `values.value` dataclass, like the contract's values: built here only, on exec's path.)"""

    limit: str
    """`write_limit`, `free_floor` or `inode_floor`."""
    limit_bytes: int
    """The limit (an inode count for `inode_floor`)."""
    observed_bytes: int
    """Bytes written so far, bytes free, or inodes free."""
    message: str


def size_text(n: int) -> str:
    """Bytes in binary units, e.g. `2.0 GiB`, `100.0 MiB`, `512 B`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def meter_gap(dropped_batches: int, unattributed_bytes: int) -> str:
    """What the exit-record listener missed while one sandbox ran, for a person; ""
    when nothing. (Records still waiting for their owner when the sandbox ends are
    judged `exits.PENDING_S` later, so a gap at its very end is not seen here.)"""
    missed = []
    if dropped_batches:
        missed.append(
            f"the kernel dropped exit records {dropped_batches} time(s) (processes "
            "exited faster than warden read them)"
        )
    if unattributed_bytes:
        missed.append(
            f"{size_text(unattributed_bytes)} written by processes that exited could not "
            "be attributed to any sandbox"
        )
    if not missed:
        return ""
    return (
        "while this sandbox ran, " + " and ".join(missed) + ": its count of bytes "
        "written may be low by that much, so its disk write limit may have been crossed "
        "unseen (the per-file limit and the free-space floors still held)"
    )


def write_breach(written: int, limit: int) -> DiskBreach:
    return DiskBreach(
        limit="write_limit",
        limit_bytes=limit,
        observed_bytes=written,
        message=(
            f"disk limit: the sandbox wrote {size_text(written)}, reaching its write "
            f"limit of {size_text(limit)}, and was killed; {WRITE_LIMIT_HOW}"
        ),
    )


def floor_breach(free: int, floor: int, workspace: Path) -> DiskBreach:
    return DiskBreach(
        limit="free_floor",
        limit_bytes=floor,
        observed_bytes=free,
        message=(
            f"disk limit: free space on the workspace's file system ({workspace}) fell to "
            f"{size_text(free)}, below the floor of {size_text(floor)}, and the sandbox "
            f"was killed; {FREE_FLOOR_HOW}"
        ),
    )


def inode_breach(free: int, floor: int, workspace: Path) -> DiskBreach:
    return DiskBreach(
        limit="inode_floor",
        limit_bytes=floor,
        observed_bytes=free,
        message=(
            f"disk limit: free inodes on the workspace's file system ({workspace}) fell "
            f"to {free}, below the floor of {floor}, and the sandbox was killed; "
            f"{INODE_FLOOR_HOW}"
        ),
    )


def free_space(where: Path | int) -> tuple[int, int | None]:
    """Bytes and inodes an unprivileged user can still use on the file system of
    `where` (a path, or a descriptor: the same file system however the path moves);
    inodes None when the file system does not count them (btrfs reports 0 of 0)."""
    st = os.fstatvfs(where) if isinstance(where, int) else os.statvfs(where)
    return st.f_bavail * st.f_frsize, (st.f_favail if st.f_files else None)


class Meter(Protocol):
    def written(self) -> int | None: ...
    def close(self) -> None: ...


class ProcessTreeMeter:
    """Bytes written by every process of one container, read on the host (the
    fallback when `exits.ExitRecords` is not available).

    Bound to the container's PID namespace at creation: if the init process goes
    away (and its PID could be reused by a host process), `written()` returns None
    instead of measuring someone else.
    """

    def __init__(self, init_pid: int, proc: Path = Path("/proc")) -> None:
        self._init = proc / str(init_pid)
        self._ns = os.readlink(self._init / "ns" / "pid")
        self._proc = self._init / "root" / "proc"

    def written(self) -> int | None:
        """The container's `write_bytes` total now, or None once it is gone."""
        if not self._same_namespace():
            return None
        total = 0
        try:
            names = os.listdir(self._proc)
        except OSError:
            return None
        for name in names:
            if name.isdigit():
                total += _write_bytes(self._proc / name / "io")
        # Checked again: a sample taken while the PID changed hands is discarded.
        return total if self._same_namespace() else None

    def close(self) -> None:
        pass

    def _same_namespace(self) -> bool:
        try:
            return os.readlink(self._init / "ns" / "pid") == self._ns
        except OSError:
            return False


def _write_bytes(io_file: Path) -> int:
    try:
        text = io_file.read_text()
    except OSError:  # exited (and reaped) since the listing: its bytes moved to its parent
        return 0
    for line in text.splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split(":", 1)[1])
    return 0


class DiskWatch:
    """Polls one sandbox in a thread; on the first breach calls `kill` once."""

    def __init__(
        self,
        *,
        limits: DiskLimits,
        workspace: Path | None,
        meter: Meter | None,
        kill: Callable[[], None],
        poll_s: float = POLL_S,
        name: str = "",
        find_meter: Callable[[], Meter | None] | None = None,
        records: exits.ExitRecords | None = None,
    ) -> None:
        self.limits = limits
        self.workspace = workspace
        self.meter = meter if limits.write_limit_bytes else None
        self._find_meter = find_meter if limits.write_limit_bytes else None
        """Makes the meter in the watcher's thread, so the engine round trip it may
        need (the init's host PID) is not on the path that starts the sandbox."""
        self._records = records
        self._gaps_at_start = records.gaps() if records is not None else (0, 0)
        """The exit-record listener's misses when this sandbox was started."""
        self.kill = kill
        self.poll_s = poll_s
        self.breach: DiskBreach | None = None
        self.written = 0
        """High-water mark of the bytes written (0 when not measured)."""
        self.samples = 0
        self._workspace_fd: int | None = None
        """The workspace, held open while watched: its file system's floors are read
        through it, so a workspace renamed or removed meanwhile is still measured."""
        floors = limits.free_floor_bytes or limits.free_inode_floor
        if self.workspace is not None and floors:
            try:
                self._workspace_fd = os.open(
                    self.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                )
            except OSError as exc:
                log.warning(
                    "cannot open the workspace %s to watch its free space (%s): the "
                    "free-space floor is not enforced for this sandbox",
                    self.workspace,
                    exc.strerror or exc,
                )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"warden-disk-{name}", daemon=True)

    def start(self) -> DiskWatch:
        if self.meter is not None or self._find_meter is not None or self._workspace_fd is not None:
            self._thread.start()
        return self

    def meter_gap(self) -> str:
        """What the exit-record listener missed since this sandbox started ("" when
        nothing, or when it is not used)."""
        if self._records is None:
            return ""
        (dropped, unattributed), (now_dropped, now_unattributed) = (
            self._gaps_at_start,
            self._records.gaps(),
        )
        return meter_gap(now_dropped - dropped, now_unattributed - unattributed)

    def stop(self) -> DiskBreach | None:
        """Stop watching (one last sample first) and return the breach, if any."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.meter is not None:
            self.meter.close()
        if self._workspace_fd is not None:
            fd, self._workspace_fd = self._workspace_fd, None
            os.close(fd)
        return self.breach

    def _loop(self) -> None:
        # No last sample on stop: a sandbox that ended on its own was not killed,
        # so its status stays its own.
        if self._find_meter is not None and not self._stop.is_set():
            self.meter = self._find_meter()
        while not self._stop.is_set():
            try:
                breach = self.check()
            except Exception:  # a monitor bug must not take the run down; say so
                log.exception("disk watcher failed; the per-file limit still applies")
                return
            if breach is not None:
                self.breach = breach
                try:
                    self.kill()
                except Exception:
                    log.exception("could not kill a sandbox over its disk limit")
                return
            self._stop.wait(self.poll_s)

    def check(self) -> DiskBreach | None:
        """One sample: the breach it shows, or None."""
        self.samples += 1
        cap = self.limits.write_limit_bytes
        if self.meter is not None:
            now = self.meter.written()
            if now is None:
                self.meter.close()
                self.meter = None  # the container is gone: nothing more to count
            else:
                self.written = max(self.written, now)
                if self.written >= cap:
                    return write_breach(self.written, cap)
        floor, inode_floor = self.limits.free_floor_bytes, self.limits.free_inode_floor
        if self.workspace is not None and self._workspace_fd is not None:
            free, inodes = free_space(self._workspace_fd)
            if floor and free < floor:
                return floor_breach(free, floor, self.workspace)
            if inode_floor and inodes is not None and inodes < inode_floor:
                return inode_breach(inodes, inode_floor, self.workspace)
        return None


def _exited(pid: int) -> bool:
    """Whether the sandbox's init has ended since `host_pid` found it in the container's
    cgroup: gone, or (exiting, not yet reaped) moved out to the root cgroup, which a
    live container's init never is. A sandbox that finished before its meter was made
    (`warden exec -- true`) is no reason to warn."""
    return exits.cgroup_of(pid) in (None, "", "/")


class DiskGuardedBackend(ContainerBackend):
    """A backend whose sandboxes are watched for their `spec.limits` disk limits."""

    def __init__(self, inner: ContainerBackend, poll_s: float = POLL_S) -> None:
        self.inner = inner
        self.poll_s = poll_s
        self._watches: dict[str, DiskWatch] = {}
        self._lock = threading.Lock()
        self._warned = False

    def start(self, spec: SandboxSpec) -> str:
        records = exits.ExitRecords.shared() if spec.limits.disk.write_limit_bytes else None
        container_id = self.inner.start(spec)
        watch = DiskWatch(
            limits=spec.limits.disk,
            workspace=spec.workspace,
            meter=None,
            find_meter=lambda: self._meter(container_id, records),
            kill=lambda: self.inner.kill(container_id),
            poll_s=self.poll_s,
            name=container_id[:12],
            records=records,
        )
        with self._lock:
            self._watches[container_id] = watch
        watch.start()
        return container_id

    def _meter(self, container_id: str, records: exits.ExitRecords | None) -> Meter | None:
        # Never raises: the container is running, and its id must reach the caller
        # (who removes it) whatever happens here.
        try:
            pid = self.inner.host_pid(container_id)
            if not pid:
                return None
            try:
                if records is not None:
                    try:
                        return exits.CgroupMeter(pid, records)
                    except OSError as exc:
                        if _exited(pid):
                            return None
                        log.warning("cannot count the sandbox's writes by its cgroup (%s)", exc)
                return ProcessTreeMeter(pid)
            except OSError:
                if _exited(pid):  # it ended since its PID was read: nothing left to count
                    return None
                raise
        except Exception as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot read the sandbox's processes (%s): the disk write limit is "
                    "enforced per file only (RLIMIT_FSIZE), plus the free-space floor",
                    exc,
                )
            return None

    def wait(self, container_id: str, timeout_s: float | None) -> SandboxResult:
        result = self.inner.wait(container_id, timeout_s)
        with self._lock:
            watch = self._watches.get(container_id)
        gap = watch.meter_gap() if watch is not None else ""
        breach = self._finish(container_id)
        if gap:
            log.warning("sandbox %s: %s", container_id[:12], gap)
            result = replace(result, meter_gap=gap)
        if breach is not None:
            result = replace(result, status=SandboxStatus.DISK_LIMIT, reason=breach.message)
        return result

    def _finish(self, container_id: str) -> DiskBreach | None:
        with self._lock:
            watch = self._watches.pop(container_id, None)
        return watch.stop() if watch is not None else None

    def written(self, container_id: str) -> int:
        """Bytes the container has written so far (0 when not measured)."""
        watch = self._watches.get(container_id)
        return watch.written if watch is not None else 0

    def kill(self, container_id: str) -> None:
        self.inner.kill(container_id)

    def remove(self, container_id: str) -> None:
        self._finish(container_id)
        self.inner.remove(container_id)

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        return self.inner.list(labels)

    def host_pid(self, container_id: str) -> int | None:
        return self.inner.host_pid(container_id)
