"""Disk limits for running sandboxes: a cap on the bytes one sandbox writes, and a
free-space floor on the workspace's file system. Crossing either kills the sandbox;
its result says `disk_limit` and names the limit and how to change it.

`DiskGuardedBackend` wraps any `ContainerBackend`: `start` also starts a watcher
thread for the container, `wait` stops it and turns a kill it made into
`SandboxStatus.DISK_LIMIT` with the reason. So `TaskManager` and `warden exec`
get the same guard without `if`s of their own.

What is measured, and why (measured on cgroup v1, overlay2, the workspace a bind
mount of the host's ext4):

- **Bytes written: the sum of `write_bytes` in `/proc/PID/io` over every process in
  the container's PID namespace**, listed from the container's own `/proc`
  (`/proc/<init>/root/proc`), polled every `POLL_S` in a thread. `write_bytes` is
  charged to the process when it dirties a page (buffered writes, `mmap` stores),
  not at writeback, so it is the writer's, and tmpfs (`/tmp`, `/dev/shm`), pipes
  and sockets do not count. When a process is reaped its counters are added to
  its parent's, so the sum over the live (and zombie) processes is everything the
  container ever wrote; listing from the namespace's `/proc` also sees zombies,
  which `cgroup.procs` does not (an unreaped child's bytes would vanish there).
  Not chosen: cgroup v1 `blkio` accounting (buffered writeback is charged to the
  root cgroup: 0 bytes for a 100 MiB `dd` here); `wchar` (counts pipes, sockets
  and tmpfs); `du` of the workspace (slow, and blind to deleted files).
- **Per-file backstop: `RLIMIT_FSIZE`** (docker `ulimits` `fsize`, set by the
  backend from the same cap): no single file can grow past the cap, whatever the
  watcher's timing; the writer gets `EFBIG` / `SIGXFSZ`, and the watcher then sees
  the cap reached and kills the sandbox.
- **Free-space floor: `statvfs` of the workspace** (`f_bavail`), polled with the
  same thread; it also covers what the byte count cannot see (below).

Cost, measured here: one sample of a 7-process sandbox takes ~0.5 ms of CPU
(listing its `/proc`, reading each `io`, one `statvfs`), so ~0.3% of one core per
running sandbox at 5 samples/s; `warden exec true` showed no difference beyond the
noise of a shared machine.

What it does not catch: space used without `write_bytes` (`fallocate` with
`FALLOC_FL_KEEP_SIZE`, metadata of millions of empty files or directories, inode
exhaustion) only trips the floor, after the fact; the overshoot between two polls
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
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.backend.base import (
    ContainerBackend,
    ContainerInfo,
    DiskLimits,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)

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


class DiskBreach(BaseModel):
    """A limit a sandbox crossed; `message` is what users and the parent model read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limit: str
    """`write_limit` or `free_floor`."""
    limit_bytes: int
    observed_bytes: int
    """Bytes written so far, or bytes free."""
    message: str


def size_text(n: int) -> str:
    """Bytes in binary units, e.g. `2.0 GiB`, `100.0 MiB`, `512 B`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


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


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged user can still write on `path`'s file system."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class ProcessTreeMeter:
    """Bytes written by every process of one container, read on the host.

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
        meter: ProcessTreeMeter | None,
        kill: Callable[[], None],
        poll_s: float = POLL_S,
        name: str = "",
        find_meter: Callable[[], ProcessTreeMeter | None] | None = None,
    ) -> None:
        self.limits = limits
        self.workspace = workspace
        self.meter = meter if limits.write_limit_bytes else None
        self._find_meter = find_meter if limits.write_limit_bytes else None
        """Makes the meter in the watcher's thread, so the engine round trip it may
        need (the init's host PID) is not on the path that starts the sandbox."""
        self.kill = kill
        self.poll_s = poll_s
        self.breach: DiskBreach | None = None
        self.written = 0
        """High-water mark of the bytes written (0 when not measured)."""
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"warden-disk-{name}", daemon=True)

    def start(self) -> DiskWatch:
        if (
            self.meter is not None
            or self._find_meter is not None
            or (self.workspace and self.limits.free_floor_bytes)
        ):
            self._thread.start()
        return self

    def stop(self) -> DiskBreach | None:
        """Stop watching (one last sample first) and return the breach, if any."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
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
                self.meter = None  # the container is gone: nothing more to count
            else:
                self.written = max(self.written, now)
                if self.written >= cap:
                    return write_breach(self.written, cap)
        floor = self.limits.free_floor_bytes
        if self.workspace is not None and floor:
            free = free_bytes(self.workspace)
            if free < floor:
                return floor_breach(free, floor, self.workspace)
        return None


class DiskGuardedBackend(ContainerBackend):
    """A backend whose sandboxes are watched for their `spec.limits` disk limits."""

    def __init__(self, inner: ContainerBackend, poll_s: float = POLL_S) -> None:
        self.inner = inner
        self.poll_s = poll_s
        self._watches: dict[str, DiskWatch] = {}
        self._lock = threading.Lock()
        self._warned = False

    def start(self, spec: SandboxSpec) -> str:
        container_id = self.inner.start(spec)
        watch = DiskWatch(
            limits=spec.limits.disk,
            workspace=spec.workspace,
            meter=None,
            find_meter=lambda: self._meter(container_id),
            kill=lambda: self.inner.kill(container_id),
            poll_s=self.poll_s,
            name=container_id[:12],
        )
        with self._lock:
            self._watches[container_id] = watch
        watch.start()
        return container_id

    def _meter(self, container_id: str) -> ProcessTreeMeter | None:
        # Never raises: the container is running, and its id must reach the caller
        # (who removes it) whatever happens here.
        try:
            pid = self.inner.host_pid(container_id)
            return ProcessTreeMeter(pid) if pid else None
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
        breach = self._finish(container_id)
        if breach is None:
            return result
        return result.model_copy(
            update={"status": SandboxStatus.DISK_LIMIT, "reason": breach.message}
        )

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
