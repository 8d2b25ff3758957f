"""Bytes written by a sandbox's processes, counted so that no process can hide them:
live threads from the host's `/proc`, exited ones from the kernel's exit records.

Why not only `/proc/PID/io`: a process's `write_bytes` moves into its parent's
counters only when the parent *waits* for it. A parent that ignores SIGCHLD (or
sets `SA_NOCLDWAIT`) has its children reaped by the kernel, and their bytes vanish
from every `/proc` file; a child that lives less than one poll is never seen at all.

So the count is split in two parts that never overlap:

- **exited threads**: the kernel's taskstats interface (generic netlink, family
  `TASKSTATS`) sends one record per exiting thread, with that thread's own
  `write_bytes`, its host PID and its parent's, to every listener registered for
  the CPUs (`TASKSTATS_CMD_ATTR_REGISTER_CPUMASK`). One listener per warden process
  (`ExitRecords.shared`) attributes each record to a watched sandbox: the thread
  or its parent was seen in the sandbox's cgroup, or the parent is alive in it
  (`/proc/PPID/cgroup`), or the parent's own exit record leads there (orphans are
  re-parented inside the container, so the chain ends in it). Registering needs
  CAP_NET_ADMIN (root); without it warden falls back to `disk.ProcessTreeMeter` and
  says what that misses.
- **live threads**: every thread in the sandbox's cgroup (`tasks`), each with its
  *own* counters (`/proc/TID/task/TID/io`), skipping threads already exiting
  (`PF_EXITING` in `/proc/TID/stat`: set before the exit record is sent). The exit
  total is read *before* the threads, so a thread is never in both.

Records the kernel could not queue (the receive buffer overflowed) are lost; warden
says so once. Written by hand: the record is one C struct at fixed offsets
(`linux/taskstats.h`), and no maintained Python library reads taskstats.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CgroupMeter", "ExitRecords", "ExitTally"]

log = logging.getLogger("warden.disk")

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_ATTR_REGISTER_CPUMASK = 3
TASKSTATS_TYPE_PID = 1
TASKSTATS_TYPE_STATS = 3
TASKSTATS_TYPE_AGGR_PID = 4
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
NLM_F_ACK = 4
SO_RCVBUFFORCE = 33
PF_EXITING = 0x4

# Offsets in struct taskstats (linux/taskstats.h, unchanged since version 4).
OFF_PID, OFF_PPID, OFF_WRITE_BYTES = 128, 132, 256
MIN_STATS_LEN = OFF_WRITE_BYTES + 8

RECEIVE_BUFFER_BYTES = 8 * 1024 * 1024
"""Room for ~16,000 exit records between two reads."""
PARENTS_REMEMBERED = 16_384
"""Recent exits kept as pid → parent, to follow a chain whose members all exited."""
MAX_CHAIN = 32
"""Parents followed for one record before it waits for more records."""
BACKLOG_S = 10.0
"""Recent exits that wrote are kept this long, so a sandbox watched only after its
first processes ended (the watcher starts after the engine's start) still gets them."""
MAX_BACKLOG = 4096
PENDING_S = 2.0
"""How long a record whose sandbox is not yet known waits for its parent's record."""
MAX_PENDING = 4096

_NLMSG = struct.Struct("IHHII")
_GENL = struct.Struct("BBH")
_NLA = struct.Struct("HH")


class ExitRecordsUnavailable(OSError):
    """The kernel refused the taskstats listener (no CAP_NET_ADMIN, or no taskstats)."""


@dataclass
class ExitTally:
    """What the exit records of one sandbox add up to."""

    cgroup: str
    """The sandbox's cgroup path (in the hierarchy `CgroupMeter` reads)."""
    exited_bytes: int = 0
    members: set[int] = field(default_factory=set)
    """Thread ids seen in the cgroup at the last two samples."""
    _previous: set[int] = field(default_factory=set)

    def seen(self, tids: set[int]) -> None:
        self.members = self._previous | tids
        self._previous = tids


@dataclass
class _Pending:
    pid: int
    ppid: int
    written: int
    since: float


def _attr(kind: int, payload: bytes) -> bytes:
    length = _NLA.size + len(payload)
    return _NLA.pack(length, kind) + payload + b"\0" * (-length % 4)


def _attrs(buf: bytes) -> list[tuple[int, bytes]]:
    found, at = [], 0
    while at + _NLA.size <= len(buf):
        length, kind = _NLA.unpack_from(buf, at)
        if length < _NLA.size:
            break
        found.append((kind & 0x3FFF, buf[at + _NLA.size : at + length]))
        at += (length + 3) & ~3
    return found


def _messages(data: bytes) -> list[tuple[int, bytes]]:
    found, at = [], 0
    while at + _NLMSG.size <= len(data):
        length, kind, _flags, _seq, _port = _NLMSG.unpack_from(data, at)
        if length < _NLMSG.size:
            break
        found.append((kind, data[at + _NLMSG.size : at + length]))
        at += (length + 3) & ~3
    return found


def parse_exit(body: bytes) -> tuple[int, int, int] | None:
    """(pid, ppid, write_bytes) of one TASKSTATS_CMD_NEW message's per-thread record
    (the body after the netlink header), or None for any other message."""
    for kind, payload in _attrs(body[_GENL.size :]):
        if kind != TASKSTATS_TYPE_AGGR_PID:
            continue
        for inner, stats in _attrs(payload):
            if inner == TASKSTATS_TYPE_STATS and len(stats) >= MIN_STATS_LEN:
                pid, ppid = struct.unpack_from("II", stats, OFF_PID)
                (written,) = struct.unpack_from("Q", stats, OFF_WRITE_BYTES)
                return pid, ppid, written
    return None


def cgroup_of(pid: int | str, proc: Path = Path("/proc")) -> str | None:
    """The pid's path in the `pids` hierarchy (cgroup v1), else in the unified one."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    unified = None
    for line in text.splitlines():
        _num, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return path
        if controllers == "":
            unified = path
    return unified


def _cpumask() -> bytes:
    try:
        possible = Path("/sys/devices/system/cpu/possible").read_text().strip()
    except OSError:
        possible = f"0-{(os.cpu_count() or 1) - 1}"
    return possible.encode() + b"\0"


class ExitRecords:
    """One taskstats listener for this process; sandboxes register an `ExitTally`."""

    _shared: ExitRecords | None = None
    _shared_error: str | None = None
    _shared_lock = threading.Lock()

    def __init__(self, proc: Path = Path("/proc"), sock: socket.socket | None = None) -> None:
        """Registers with the kernel; `sock` (tests) is read instead, unregistered."""
        self._proc = proc
        self._sock = sock if sock is not None else self._register()
        self._lock = threading.Lock()
        self._tallies: dict[str, ExitTally] = {}
        self._parents: OrderedDict[int, int] = OrderedDict()
        self._pending: list[_Pending] = []
        self._backlog: list[_Pending] = []
        self.lost_records = False
        self.dropped_batches = 0
        """Times the kernel dropped records (its receive buffer was full)."""
        self.unattributed_bytes = 0
        """Bytes of exit records no sandbox (and no process outside them) could be
        found for within `PENDING_S`."""
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="warden-exit-records", daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> ExitRecords | None:
        """The process's listener, started on first use; None when the kernel refuses
        it (`unavailable` says why)."""
        with cls._shared_lock:
            if cls._shared is None and cls._shared_error is None:
                try:
                    cls._shared = cls()
                except OSError as exc:
                    # Said by the run and by `warden exec` (`weakened.weakened_guards`).
                    cls._shared_error = str(exc) or type(exc).__name__
            return cls._shared

    @classmethod
    def unavailable(cls) -> str | None:
        """Why the kernel refused the listener (after `shared`), or None."""
        return cls._shared_error

    # -- registration ---------------------------------------------------------

    def _register(self) -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        try:
            sock.bind((0, 0))
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER_BYTES)
            sock.settimeout(2.0)
            family = self._family(sock)
            self._request(
                sock, family, TASKSTATS_CMD_GET,
                _attr(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, _cpumask()),
            )  # fmt: skip
            sock.settimeout(0.5)
        except BaseException:
            sock.close()
            raise
        return sock

    def _family(self, sock: socket.socket) -> int:
        reply = self._request(
            sock, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, _attr(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")
        )
        for kind, payload in _attrs(reply[_GENL.size :]):
            if kind == CTRL_ATTR_FAMILY_ID:
                return int(struct.unpack_from("H", payload)[0])
        raise ExitRecordsUnavailable("the kernel has no TASKSTATS family")

    @staticmethod
    def _request(sock: socket.socket, family: int, cmd: int, attrs: bytes) -> bytes:
        body = _GENL.pack(cmd, 1, 0) + attrs
        header = _NLMSG.pack(_NLMSG.size + len(body), family, NLM_F_REQUEST | NLM_F_ACK, 1, 0)
        sock.send(header + body)
        while True:
            for kind, payload in _messages(sock.recv(65536)):
                if kind == NLMSG_ERROR:
                    (code,) = struct.unpack_from("i", payload)
                    if code:
                        raise ExitRecordsUnavailable(-code, os.strerror(-code))
                    return b""
                if kind == family or family == GENL_ID_CTRL:
                    return payload

    def close(self) -> None:
        """Stop reading (tests; the shared listener lives as long as the process)."""
        self._closed.set()
        self._thread.join()
        self._sock.close()

    # -- tallies --------------------------------------------------------------

    def watch(self, cgroup: str) -> ExitTally:
        """Start counting `cgroup`'s exits, with those of the last `BACKLOG_S` that
        lead there (its processes that ended before it was watched)."""
        with self._lock:
            if cgroup in self._tallies:
                return self._tallies[cgroup]
            tally = self._tallies[cgroup] = ExitTally(cgroup)
            for record in self._backlog:
                if self._owner(record.pid, record.ppid) is tally:
                    tally.exited_bytes += record.written
                    tally.members.add(record.pid)
        return tally

    def unwatch(self, tally: ExitTally) -> None:
        with self._lock:
            if self._tallies.get(tally.cgroup) is tally:
                del self._tallies[tally.cgroup]

    def exited_bytes(self, tally: ExitTally) -> int:
        with self._lock:
            return tally.exited_bytes

    def gaps(self) -> tuple[int, int]:
        """What the listener missed so far: (dropped batches, unattributed bytes).
        A sandbox compares them at its start and end (`disk.DiskGuardedBackend`)."""
        with self._lock:
            return self.dropped_batches, self.unattributed_bytes

    # -- the reader -----------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                data = b""
            except BlockingIOError:
                time.sleep(0.05)
                data = b""
            except OSError as exc:
                if exc.errno == 105:  # ENOBUFS: the kernel dropped records
                    if not self.lost_records:
                        log.warning(
                            "exit records were dropped (processes exit faster than warden "
                            "reads them): bytes written by exited processes may be "
                            "under-counted"
                        )
                    with self._lock:
                        self.lost_records = True
                        self.dropped_batches += 1
                    continue
                log.exception("the exit-record reader stopped")
                return
            with self._lock:
                for _kind, body in _messages(data):
                    record = parse_exit(body)
                    if record is not None:
                        self._take(*record)
                self._retry_pending()

    def _take(self, pid: int, ppid: int, written: int) -> None:
        self._parents[pid] = ppid
        self._parents.move_to_end(pid)
        while len(self._parents) > PARENTS_REMEMBERED:
            self._parents.popitem(last=False)
        if written:
            record = _Pending(pid, ppid, written, time.monotonic())
            self._remember(record)
            if self._tallies:
                self._attribute(record)

    def _remember(self, record: _Pending) -> None:
        self._backlog.append(record)
        if len(self._backlog) > MAX_BACKLOG or record.since - self._backlog[0].since > BACKLOG_S:
            self._backlog = [
                r for r in self._backlog[-MAX_BACKLOG:] if record.since - r.since <= BACKLOG_S
            ]

    def _attribute(self, record: _Pending) -> bool:
        tally = self._owner(record.pid, record.ppid)
        if tally is None:
            if len(self._pending) < MAX_PENDING:
                self._pending.append(record)
            return False
        if tally.cgroup:  # "" marks a process outside every watched sandbox
            tally.exited_bytes += record.written
            tally.members.add(record.pid)
        return True

    def _owner(self, pid: int, ppid: int) -> ExitTally | None:
        for tally in self._tallies.values():
            if pid in tally.members:
                return tally
        for _ in range(MAX_CHAIN):
            for tally in self._tallies.values():
                if ppid in tally.members:
                    return tally
            path = cgroup_of(ppid, self._proc)
            if path is not None:
                found = self._tallies.get(path)
                return found if found is not None else ExitTally("")
            if ppid not in self._parents:
                return None
            ppid = self._parents[ppid]
        return None

    def _retry_pending(self) -> None:
        if not self._pending:
            return
        now = time.monotonic()
        waiting, self._pending = self._pending, []
        for record in waiting:
            if not self._attribute(record) and now - record.since > PENDING_S:
                self._pending.remove(record)
                self.unattributed_bytes += record.written


class CgroupMeter:
    """Bytes written by every thread that ever ran in one container: its live threads
    (read from its cgroup) plus its exit records (`ExitRecords`)."""

    def __init__(
        self, init_pid: int, records: ExitRecords, cgroup_root: Path = Path("/sys/fs/cgroup")
    ) -> None:
        path = cgroup_of(init_pid)
        if not path or path == "/":
            raise OSError(f"process {init_pid} is in no container cgroup")
        tasks = cgroup_root / "pids" / path.lstrip("/") / "tasks"
        if not tasks.exists():
            tasks = cgroup_root / path.lstrip("/") / "cgroup.threads"
        if not tasks.exists():
            raise OSError(f"cannot find the thread list of cgroup {path}")
        self._tasks = tasks
        self._records = records
        self.tally = records.watch(path)

    def written(self) -> int | None:
        """The container's bytes written so far, or None once its cgroup is gone."""
        exited = self._records.exited_bytes(self.tally)  # before the live threads
        try:
            tids = {int(t) for t in self._tasks.read_text().split()}
        except (OSError, ValueError):
            return None
        self.tally.seen(tids)
        return exited + sum(_own_written(tid) for tid in tids)

    def close(self) -> None:
        self._records.unwatch(self.tally)


def _own_written(tid: int) -> int:
    """One live thread's own write_bytes; 0 when it is exiting (its exit record
    counts it) or gone."""
    base = Path(f"/proc/{tid}/task/{tid}")
    try:
        stat = (base / "stat").read_text()
        flags = int(stat.rsplit(")", 1)[1].split()[6])
        if flags & PF_EXITING:
            return 0
        for line in (base / "io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split(":", 1)[1])
    except (OSError, ValueError, IndexError):
        return 0
    return 0
