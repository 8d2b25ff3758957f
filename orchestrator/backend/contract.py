"""The one plug-in point for where sandbox containers run: the contract every
backend implements (`ContainerBackend`) and the values that cross it.

A backend turns a `SandboxSpec` into a running, hardened container and reports
a typed `SandboxResult`. Docker (`docker.py`) is the default; `fake.py` is an
in-process stand-in for unit tests of the layers above, never for isolation
tests.
"""

from __future__ import annotations

import enum
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import labels as _labels
from orchestrator.config import BUILD_DEADLINE_VARIABLE as BUILD_DEADLINE_VARIABLE
from orchestrator.config import BUILD_DISK_VARIABLE as BUILD_DISK_VARIABLE
from orchestrator.config import BUILD_MEMORY_VARIABLE as BUILD_MEMORY_VARIABLE
from orchestrator.config import BUILD_PIDS_VARIABLE as BUILD_PIDS_VARIABLE
from orchestrator.config import (
    DEFAULT_BUILD_DEADLINE_S,
    DEFAULT_BUILD_MEMORY_BYTES,
    DEFAULT_BUILD_PIDS,
    DEFAULT_DISK_FREE_FLOOR_BYTES,
    DEFAULT_DISK_FREE_INODES,
    DEFAULT_DISK_WRITE_BYTES,
)
from orchestrator.errors import ConfigError
from orchestrator.values import value
from sandbox_tools.wire import WORKSPACE

if TYPE_CHECKING:
    from orchestrator.config import Settings

DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024
DEFAULT_CPUS = 1.0
DEFAULT_PIDS = 256
DEFAULT_TMP_BYTES = 64 * 1024 * 1024
DEFAULT_OUTPUT_LIMIT_BYTES = 1024 * 1024
"""stdout and stderr are each capped at this; head and tail are kept."""
_MIN_MEMORY_BYTES = 6 * 1024 * 1024
"""The engine's own floor for a memory limit."""

# The values below are frozen, keyword-only stdlib dataclasses made by `values.value`
# (only `__init__` is compiled per class; not slotted: that builds each class twice, at
# every start), not pydantic models: warden's own code builds them and hands them across this interface (they are
# not user config, which is validated as pydantic models where it is read), and
# `warden exec` builds them on every start. Creating the pydantic models and importing
# pydantic cost that start about 110 ms of its ~55 ms budget (issue 39). Each one's
# `__post_init__` enforces what the models' constraints did, and raises `ConfigError`
# (a ValueError) naming the field, the value and what is accepted.


def _set(value: object, name: str, new: object) -> None:
    object.__setattr__(value, name, new)


def _int(owner: object, name: str, *, gt: int | None = None, ge: int | None = None) -> None:
    value = getattr(owner, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} is not a whole number")
    _bounded(owner, name, value, gt=gt, ge=ge)


def _float(owner: object, name: str, *, gt: float | None = None) -> None:
    value = getattr(owner, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} is not a number")
    _set(owner, name, float(value))
    _bounded(owner, name, value, gt=gt)


def _bounded(
    owner: object, name: str, value: float, *, gt: float | None = None, ge: float | None = None
) -> None:
    if gt is not None and not value > gt:
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} must be greater than {gt}")
    if ge is not None and not value >= ge:
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} must be at least {ge}")


def _path(owner: object, name: str, *, optional: bool = False) -> None:
    value = getattr(owner, name)
    if value is None and optional:
        return
    if not isinstance(value, str | PathLike):
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} is not a path")
    _set(owner, name, Path(value))


def _strings(owner: object, name: str) -> None:
    """A mapping of text to text, copied (so the caller's dict cannot change it later)."""
    value = getattr(owner, name)
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} must map text to text")
    _set(owner, name, dict(value))


def _text(owner: object, name: str, *, optional: bool = False) -> None:
    value = getattr(owner, name)
    if not (isinstance(value, str) or (value is None and optional)):
        raise ConfigError(f"{type(owner).__name__}.{name}={value!r} is not text")


@value
class Mount:
    """An extra bind mount (the workspace has its own field)."""

    source: Path
    """Host path."""
    target: str
    """Absolute path inside the container."""
    read_only: bool = True
    confined_to: Path | None = None
    """When set, `source` must lie inside this directory with no symbolic link on the
    way; the backend re-checks it immediately before creating the container (a
    sandbox may have swapped a workspace path for a link since it was chosen)."""

    def __post_init__(self) -> None:
        _path(self, "source")
        _text(self, "target")
        _path(self, "confined_to", optional=True)
        if not isinstance(self.read_only, bool):
            raise ConfigError(f"Mount.read_only={self.read_only!r} is not true or false")


@value
class DiskLimits:
    """Disk limits of one sandbox, enforced by `disk.DiskGuardedBackend` (and the
    per-file part by the backend as RLIMIT_FSIZE). Crossing any kills it."""

    write_limit_bytes: int = DEFAULT_DISK_WRITE_BYTES
    """Most bytes the sandbox may write; also the largest file it may make. 0: no cap."""
    free_floor_bytes: int = DEFAULT_DISK_FREE_FLOOR_BYTES
    """Free bytes the workspace's file system must keep. 0: no floor."""
    free_inode_floor: int = DEFAULT_DISK_FREE_INODES
    """Free inodes the workspace's file system must keep (file systems that report no
    inode count, such as btrfs, are not checked). 0: no floor."""

    def __post_init__(self) -> None:
        _int(self, "write_limit_bytes", ge=0)
        _int(self, "free_floor_bytes", ge=0)
        _int(self, "free_inode_floor", ge=0)

    @classmethod
    def from_settings(
        cls, settings: Settings, write_limit: int | None = None, free_floor: int | None = None
    ) -> DiskLimits:
        """The sandboxes' disk limits: `settings`, overridden by the CLI values given."""
        return cls(
            write_limit_bytes=settings.disk_write_limit if write_limit is None else write_limit,
            free_floor_bytes=settings.disk_free_floor if free_floor is None else free_floor,
            free_inode_floor=settings.disk_free_inodes,
        )


@value
class BuildLimits:
    """Limits of one image build from a workspace Dockerfile (a dev container), all
    of its steps together; enforced by `images.buildbox`. Crossing one fails the
    build with an error naming it and its variable."""

    pids: int = DEFAULT_BUILD_PIDS
    """Most processes of all build steps at once (WARDEN_BUILD_PIDS_LIMIT; 0: none)."""
    memory_bytes: int = DEFAULT_BUILD_MEMORY_BYTES
    """Memory of all build steps together, no swap (WARDEN_BUILD_MEMORY)."""
    deadline_s: float = DEFAULT_BUILD_DEADLINE_S
    """Wall-clock time of the whole build (WARDEN_BUILD_DEADLINE_S)."""
    disk_bytes: int = DEFAULT_DISK_WRITE_BYTES
    """Bytes all steps write together (WARDEN_BUILD_DISK_LIMIT, by default the sandbox
    write limit; 0: no cap): their layers, measured while they run, and no single
    file larger (RLIMIT_FSIZE in every step)."""

    def __post_init__(self) -> None:
        _int(self, "pids", ge=0)
        _int(self, "memory_bytes", gt=_MIN_MEMORY_BYTES)
        _float(self, "deadline_s", gt=0)
        _int(self, "disk_bytes", ge=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> BuildLimits:
        return cls(
            pids=settings.build_pids_limit,
            memory_bytes=settings.build_memory,
            deadline_s=settings.build_deadline_s,
            disk_bytes=(
                settings.disk_write_limit
                if settings.build_disk_limit is None
                else settings.build_disk_limit
            ),
        )


@value
class ResourceLimits:
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    """Memory limit; swap is set to the same value, so there is no swap."""
    cpus: float = DEFAULT_CPUS
    """CPU quota, in cores."""
    pids: int = DEFAULT_PIDS
    """Most processes/threads the container may have at once."""
    tmp_bytes: int = DEFAULT_TMP_BYTES
    """Size of the writable tmpfs at /tmp (the root file system is read-only)."""
    disk: DiskLimits = field(default_factory=DiskLimits)
    """Bytes written and free-space floor; see `DiskLimits`."""

    def __post_init__(self) -> None:
        _int(self, "memory_bytes", gt=_MIN_MEMORY_BYTES)
        _float(self, "cpus", gt=0)
        _int(self, "pids", ge=8)
        _int(self, "tmp_bytes", gt=0)
        if not isinstance(self.disk, DiskLimits):
            raise ConfigError(f"ResourceLimits.disk={self.disk!r} is not a DiskLimits")

    def to_json(self) -> str:
        """These limits as one JSON object (keys sorted: equal limits, equal text)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ResourceLimits:
        """The limits `to_json` wrote; ConfigError for anything else."""
        try:
            values = json.loads(text)
            disk = DiskLimits(**values.pop("disk"))
            return cls(**values, disk=disk)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConfigError(f"not resource limits as JSON: {text[:200]!r} ({exc})") from exc


@value
class SandboxSpec:
    """Everything needed to start one sandbox container."""

    image: str
    command: list[str]
    """At least one word."""
    workspace: Path | None = None
    """Host directory bind-mounted read-write at /workspace."""
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    """Numeric `uid:gid` (or `uid`) to run as; None means the workspace owner. Never 0."""
    groups: list[int] = field(default_factory=list)
    """Supplementary gids: the group of this sandbox's own socket directory
    (`broker.listener.sandbox_group`), so no other sandbox can open its sockets."""
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    labels: dict[str, str] = field(default_factory=dict)
    """Caller (user) labels. `warden.*` keys are refused here: warden's own go below."""
    warden_labels: dict[str, str] = field(default_factory=dict)
    """warden's own labels, built with `labels.warden_labels(session, task=…|exec=…)`.

    Must carry `warden.session` (so `warden cleanup` can find the container); every
    key must be in the `warden.` namespace; `warden.version` is added when missing.
    Kept apart from `labels` so a user label can never impersonate warden's."""
    timeout_s: float | None = None
    """Deadline for `run`; on expiry the container is killed."""
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES
    workdir: str = WORKSPACE
    runtime: str | None = None
    """OCI runtime (e.g. `runsc`); None is the engine default."""

    def __post_init__(self) -> None:
        _text(self, "image")
        command = self.command
        if (
            isinstance(command, str | bytes)
            or not isinstance(command, list | tuple)
            or not all(isinstance(word, str) for word in command)
        ):
            raise ConfigError(f"SandboxSpec.command={command!r} is not a list of words")
        if not command:
            raise ConfigError("SandboxSpec.command is empty; give at least the program to run")
        _set(self, "command", list(command))
        _path(self, "workspace", optional=True)
        if not isinstance(self.mounts, list | tuple) or not all(
            isinstance(mount, Mount) for mount in self.mounts
        ):
            raise ConfigError(f"SandboxSpec.mounts={self.mounts!r} is not a list of Mount")
        _set(self, "mounts", list(self.mounts))
        _strings(self, "env")
        _text(self, "user", optional=True)
        if self.user is not None:
            try:
                parse_user(self.user)
            except ValueError as exc:
                raise ConfigError(f"SandboxSpec.user: {exc}") from exc
        if not isinstance(self.groups, list | tuple) or not all(
            isinstance(gid, int) and not isinstance(gid, bool) for gid in self.groups
        ):
            raise ConfigError(f"SandboxSpec.groups={self.groups!r} is not a list of gids")
        _set(self, "groups", list(self.groups))
        if not isinstance(self.limits, ResourceLimits):
            raise ConfigError(f"SandboxSpec.limits={self.limits!r} is not a ResourceLimits")
        _strings(self, "labels")
        _strings(self, "warden_labels")
        foreign = sorted(k for k in self.warden_labels if not k.startswith(_labels.NAMESPACE))
        if foreign:
            raise ConfigError(
                f"warden_labels {', '.join(foreign)} are outside the "
                f"'{_labels.NAMESPACE}' namespace; put caller labels in `labels`"
            )
        if self.timeout_s is not None:
            _float(self, "timeout_s", gt=0)
        _int(self, "output_limit_bytes", gt=0)
        _text(self, "workdir")
        _text(self, "runtime", optional=True)


def parse_user(user: str) -> tuple[int, int]:
    """`uid[:gid]` (numeric) as a pair; a missing gid equals the uid.

    Raises ValueError for names (they could map to root inside an image) and for
    uid or gid 0: a sandbox never runs as root.
    """
    uid_text, _, gid_text = user.partition(":")
    if not uid_text.isdigit() or (gid_text and not gid_text.isdigit()):
        raise ValueError(f"user {user!r} must be numeric `uid:gid` (e.g. 1000:1000)")
    uid = int(uid_text)
    gid = int(gid_text) if gid_text else uid
    if uid == 0 or gid == 0:
        raise ValueError(
            f"user {user!r} is root (uid or gid 0); sandboxes never run as root: "
            "pass an unprivileged uid:gid"
        )
    return uid, gid


def root_owned_note(workspace: Path, fallback_uid: int) -> str:
    """What to tell the person whose workspace is root-owned (sandboxes run as the
    fallback uid there, so they cannot write what only root may write)."""
    return (
        f"workspace {workspace} is owned by root; sandboxes run as uid:gid "
        f"{fallback_uid}:{fallback_uid} (never root), so they cannot write files that only "
        "root may write. Fix: chown the workspace to an unprivileged user, or pass "
        "--user UID:GID."
    )


class SandboxStatus(enum.StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMED_OUT = "timed_out"
    OOM_KILLED = "oom_killed"
    KILLED = "killed"
    DISK_LIMIT = "disk_limit"
    """Killed by warden for crossing a disk limit (`SandboxResult.reason` says which)."""
    REMOVED = "removed"
    """Removed from outside warden (e.g. `docker rm -f`) while it ran."""
    KILLED_OUTSIDE = "killed_outside"
    """Killed or stopped by someone other than this backend (`docker kill`, `docker
    stop`, `warden stop` from another process); `SandboxResult.reason` says by what
    when the engine's events tell."""


@value
class SandboxResult:
    status: SandboxStatus
    exit_code: int
    """The container's own exit code (137 after a kill, whatever the reason)."""
    stdout: str
    stderr: str
    truncated: bool
    """True when stdout or stderr lost its middle to the output cap."""
    duration_s: float
    reason: str = ""
    """Why it was ended, when known (the disk limit crossed; who killed it from
    outside); else empty."""
    meter_gap: str = ""
    """What the disk write meter may have missed while it ran (exit records the
    kernel dropped, or bytes no sandbox could be found for), said for a person;
    empty when nothing was missed."""

    def __post_init__(self) -> None:
        try:
            _set(self, "status", SandboxStatus(self.status))
        except ValueError as exc:
            raise ConfigError(f"SandboxResult.status={self.status!r} is no status") from exc
        _int(self, "exit_code")
        for name in ("stdout", "stderr", "reason", "meter_gap"):
            _text(self, name)
        if not isinstance(self.truncated, bool):
            raise ConfigError(f"SandboxResult.truncated={self.truncated!r} is not true or false")
        _float(self, "duration_s")


@value
class ContainerInfo:
    id: str
    name: str
    status: str
    labels: dict[str, str]

    def __post_init__(self) -> None:
        for name in ("id", "name", "status"):
            _text(self, name)
        _strings(self, "labels")


class ContainerBackend(ABC):
    """Where sandboxes run. Every method is blocking; call it from a worker thread."""

    @abstractmethod
    def start(self, spec: SandboxSpec) -> str:
        """Create and start a hardened container; return its id.

        Output capture begins before the process starts.
        Raises ConfigError (reserved or missing labels, bad workspace or mounts),
        EngineUnavailableError, ImageNotFoundError, ContainerStartError.
        """

    @abstractmethod
    def wait(self, container_id: str, timeout_s: float | None) -> SandboxResult:
        """Wait for exit; on timeout kill it and report `timed_out`.

        Does not remove the container. Raises EngineUnavailableError.
        """

    @abstractmethod
    def kill(self, container_id: str) -> None:
        """Kill now (SIGKILL). A container that is already gone is not an error."""

    @abstractmethod
    def remove(self, container_id: str) -> None:
        """Force-remove. A container that is already gone is not an error."""

    @abstractmethod
    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        """Containers (running or not) that carry all of these labels.

        A value of None matches any value of that label. Raises EngineUnavailableError.
        """

    def host_pid(self, container_id: str) -> int | None:
        """The host PID of the container's init, for watching it from the host (disk
        use); None when this backend cannot tell (remote engine, fake)."""
        return None

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Start, wait until `spec.timeout_s`, and always remove."""
        container_id = self.start(spec)
        try:
            return self.wait(container_id, spec.timeout_s)
        finally:
            self.remove(container_id)

    def cleanup(self, labels: Mapping[str, str | None]) -> int:
        """Remove every container carrying these labels; return how many."""
        found = self.list(labels)
        for info in found:
            self.remove(info.id)
        return len(found)
