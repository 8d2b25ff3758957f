"""Who owns a run or a container, and whether that owner is provably dead.

An owner is one orchestrator process (`warden run`, `resume`, `exec`), identified
so that a pid reused after a crash or a reboot is never mistaken for it:

- `host`: this machine's id (`/etc/machine-id`, else the host name) plus its pid
  namespace, so pids are only compared where they mean the same process;
- `boot`: the kernel's boot id (`/proc/sys/kernel/random/boot_id`): a different boot
  on the same host means every process of the old one is gone;
- `pid` and `start`: the process id and its start time in clock ticks since boot
  (field 22 of `/proc/<pid>/stat`), so a recycled pid does not look alive;
- `state`: the identity of the state dir the owner records to.

`is_dead` answers True only when death is proven; an owner on another host or in
another pid namespace, or one whose identity is incomplete, counts as alive.
Written by hand: no library models this (psutil could read the start time, but it
would be a dependency for one field of one file).

A foundation: the backend labels containers with it, `lifecycle` judges runs and
containers by it. May import: `errors`, `labels`.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import labels

if TYPE_CHECKING:
    from orchestrator.store.records import RunRecord

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
MACHINE_ID_PATH = Path("/etc/machine-id")
STATE_ID_FILE = "state-id"
"""File in the state dir holding its stable random identity."""
STAT_START_FIELD = 22
"""`/proc/<pid>/stat` field (1-based) with the process start time in clock ticks."""


@dataclass(frozen=True)
class Owner:
    """The identity of one orchestrator process (see the module docstring)."""

    host: str
    boot: str
    pid: int
    start: int
    state: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Owner | None:
        """The owner stored as JSON, or None when absent or malformed."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                host=str(data["host"]),
                boot=str(data["boot"]),
                pid=int(data["pid"]),
                start=int(data["start"]),
                state=str(data["state"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def labels(self) -> dict[str, str]:
        """Container labels that carry this identity."""
        return {
            labels.OWNER_HOST: self.host,
            labels.OWNER_BOOT: self.boot,
            labels.OWNER_PID: str(self.pid),
            labels.OWNER_START: str(self.start),
            labels.OWNER_STATE: self.state,
        }

    @classmethod
    def from_labels(cls, container_labels: dict[str, str]) -> Owner | None:
        """The owner a container's labels name, or None (an older warden made it)."""
        try:
            return cls(
                host=container_labels[labels.OWNER_HOST],
                boot=container_labels[labels.OWNER_BOOT],
                pid=int(container_labels[labels.OWNER_PID]),
                start=int(container_labels[labels.OWNER_START]),
                state=container_labels[labels.OWNER_STATE],
            )
        except (KeyError, ValueError):
            return None


@functools.cache
def host_id() -> str:
    """This machine and pid namespace: pids are comparable only within one of these."""
    try:
        machine = MACHINE_ID_PATH.read_text().strip()
    except OSError:
        machine = ""
    return f"{machine or socket.gethostname()}/{pid_namespace()}"


@functools.cache
def pid_namespace() -> int:
    """This process's pid namespace (its inode; 0 when unknown)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


@functools.cache
def boot_id() -> str:
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[STAT_START_FIELD - 3])
    except (IndexError, ValueError):
        return None


def state_id(state_dir: Path) -> str:
    """The state dir's stable identity, created on first use."""
    path = state_dir / STATE_ID_FILE
    try:
        return path.read_text().strip() or _new_state_id(path)
    except FileNotFoundError:
        return _new_state_id(path)
    except OSError:
        return _fallback_state_id(state_dir)


def _new_state_id(path: Path) -> str:
    new = "st_" + secrets.token_hex(8)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its id
        return path.read_text().strip() or _fallback_state_id(path.parent)
    except OSError:
        return _fallback_state_id(path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(new + "\n")
    return new


def _fallback_state_id(state_dir: Path) -> str:
    """Unwritable state dir: its resolved path and inode still identify it."""
    resolved = state_dir.resolve()
    try:
        inode = resolved.stat().st_ino
    except OSError:
        inode = 0
    return f"path:{resolved}:{inode}"


def current(state_dir: Path) -> Owner:
    """The identity of this process, recording to `state_dir`."""
    pid = os.getpid()
    return Owner(
        host=host_id(),
        boot=boot_id(),
        pid=pid,
        start=process_start(pid) or 0,
        state=state_id(state_dir),
    )


def is_dead(owner: Owner) -> bool:
    """True only when the owner is provably gone (see the module docstring)."""
    if owner.host != host_id() or not owner.boot or not boot_id():
        return False  # another machine or pid namespace: nothing here can tell
    if owner.boot != boot_id():
        return True  # the machine rebooted since
    start = process_start(owner.pid)
    if start is None:
        return not pid_alive(owner.pid)  # /proc may hide other users' processes
    return owner.start != 0 and start != owner.start


def run_owner_dead(run: RunRecord) -> bool:
    """True when the orchestrator that recorded `run` is provably gone (never this
    process). A run without a recorded identity is judged by its pid alone."""
    if run.pid == os.getpid():
        return False
    identity = Owner.from_json(run.owner)
    if identity is None:
        return not pid_alive(run.pid)
    return is_dead(identity)


def pid_alive(pid: int) -> bool:
    """True when a process with this id exists (it may belong to someone else)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
