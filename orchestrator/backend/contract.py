"""The one plug-in point for where sandbox containers run: the contract every
backend implements (`ContainerBackend`) and the values that cross it.

A backend turns a `SandboxSpec` into a running, hardened container and reports
a typed `SandboxResult`. Docker (`docker.py`) is the default; `fake.py` is an
in-process stand-in for unit tests of the layers above, never for isolation
tests.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
    Settings,
)
from sandbox_tools.wire import WORKSPACE

DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024
DEFAULT_CPUS = 1.0
DEFAULT_PIDS = 256
DEFAULT_TMP_BYTES = 64 * 1024 * 1024
DEFAULT_OUTPUT_LIMIT_BYTES = 1024 * 1024
"""stdout and stderr are each capped at this; head and tail are kept."""


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Mount(_Closed):
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


class DiskLimits(_Closed):
    """Disk limits of one sandbox, enforced by `disk.DiskGuardedBackend` (and the
    per-file part by the backend as RLIMIT_FSIZE). Crossing any kills it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    write_limit_bytes: int = Field(default=DEFAULT_DISK_WRITE_BYTES, ge=0)
    """Most bytes the sandbox may write; also the largest file it may make. 0: no cap."""
    free_floor_bytes: int = Field(default=DEFAULT_DISK_FREE_FLOOR_BYTES, ge=0)
    """Free bytes the workspace's file system must keep. 0: no floor."""
    free_inode_floor: int = Field(default=DEFAULT_DISK_FREE_INODES, ge=0)
    """Free inodes the workspace's file system must keep (file systems that report no
    inode count, such as btrfs, are not checked). 0: no floor."""

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


class BuildLimits(_Closed):
    """Limits of one image build from a workspace Dockerfile (a dev container), all
    of its steps together; enforced by `images.buildbox`. Crossing one fails the
    build with an error naming it and its variable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pids: int = Field(default=DEFAULT_BUILD_PIDS, ge=0)
    """Most processes of all build steps at once (WARDEN_BUILD_PIDS_LIMIT; 0: none)."""
    memory_bytes: int = Field(default=DEFAULT_BUILD_MEMORY_BYTES, gt=6 * 1024 * 1024)
    """Memory of all build steps together, no swap (WARDEN_BUILD_MEMORY)."""
    deadline_s: float = Field(default=DEFAULT_BUILD_DEADLINE_S, gt=0)
    """Wall-clock time of the whole build (WARDEN_BUILD_DEADLINE_S)."""
    disk_bytes: int = Field(default=DEFAULT_DISK_WRITE_BYTES, ge=0)
    """Bytes all steps write together (WARDEN_BUILD_DISK_LIMIT, by default the sandbox
    write limit; 0: no cap): their layers, measured while they run, and no single
    file larger (RLIMIT_FSIZE in every step)."""

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


class ResourceLimits(_Closed):
    memory_bytes: int = Field(default=DEFAULT_MEMORY_BYTES, gt=6 * 1024 * 1024)
    """Memory limit; swap is set to the same value, so there is no swap."""
    cpus: float = Field(default=DEFAULT_CPUS, gt=0)
    """CPU quota, in cores."""
    pids: int = Field(default=DEFAULT_PIDS, ge=8)
    """Most processes/threads the container may have at once."""
    tmp_bytes: int = Field(default=DEFAULT_TMP_BYTES, gt=0)
    """Size of the writable tmpfs at /tmp (the root file system is read-only)."""
    disk: DiskLimits = Field(default_factory=DiskLimits)
    """Bytes written and free-space floor; see `DiskLimits`."""


class SandboxSpec(_Closed):
    """Everything needed to start one sandbox container."""

    image: str
    command: list[str] = Field(min_length=1)
    workspace: Path | None = None
    """Host directory bind-mounted read-write at /workspace."""
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    """Numeric `uid:gid` (or `uid`) to run as; None means the workspace owner. Never 0."""
    groups: list[int] = Field(default_factory=list)
    """Supplementary gids: the group of this sandbox's own socket directory
    (`broker.listener.sandbox_group`), so no other sandbox can open its sockets."""
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    labels: dict[str, str] = Field(default_factory=dict)
    """Caller (user) labels. `warden.*` keys are refused here: warden's own go below."""
    warden_labels: dict[str, str] = Field(default_factory=dict)
    """warden's own labels, built with `labels.warden_labels(session, task=…|exec=…)`.

    Must carry `warden.session` (so `warden cleanup` can find the container); every
    key must be in the `warden.` namespace; `warden.version` is added when missing.
    Kept apart from `labels` so a user label can never impersonate warden's."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Deadline for `run`; on expiry the container is killed."""
    output_limit_bytes: int = Field(default=DEFAULT_OUTPUT_LIMIT_BYTES, gt=0)
    workdir: str = WORKSPACE
    runtime: str | None = None
    """OCI runtime (e.g. `runsc`); None is the engine default."""

    @field_validator("user")
    @classmethod
    def _numeric_non_root(cls, value: str | None) -> str | None:
        if value is not None:
            parse_user(value)
        return value

    @field_validator("warden_labels")
    @classmethod
    def _warden_namespace(cls, value: dict[str, str]) -> dict[str, str]:
        foreign = sorted(k for k in value if not k.startswith(_labels.NAMESPACE))
        if foreign:
            raise ValueError(
                f"warden_labels {', '.join(foreign)} are outside the "
                f"'{_labels.NAMESPACE}' namespace; put caller labels in `labels`"
            )
        return value


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


class SandboxResult(_Closed):
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


class ContainerInfo(_Closed):
    id: str
    name: str
    status: str
    labels: dict[str, str]


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
