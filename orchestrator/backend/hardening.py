"""What a sandbox container may do: the HostConfig every warden container gets, and its
bind mounts.

No capabilities, no new privileges, warden's own seccomp profile (`seccomp`),
a read-only root with a small `/tmp` tmpfs, an
init process (so a kill is prompt), memory (no swap), CPU and pids caps, RLIMIT_FSIZE
for the disk limit (`disk.py` watches the rest), and a capped json-file log (output is
captured over attach). The network is switched off in the create request itself
(`NetworkDisabled`, see `DockerBackend.start`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from docker.types import LogConfig, Ulimit

from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.mounts import PinnedSources, check_confined
from orchestrator.backend.seccomp import security_options
from orchestrator.errors import ConfigError
from sandbox_tools.wire import WORKSPACE

if TYPE_CHECKING:
    from docker import APIClient
    from docker.types import HostConfig

WORKSPACE_TARGET = WORKSPACE
LOG_MAX_SIZE = "1m"
"""json-file log cap per container (output is captured over attach, not from logs)."""
LOG_MAX_FILES = "1"
SHM_BYTES = 16 * 1024 * 1024
"""Size of /dev/shm (the other writable tmpfs besides /tmp)."""


def host_config(api: APIClient, spec: SandboxSpec, pins: PinnedSources | None = None) -> HostConfig:
    """The HostConfig of `spec`'s container. Raises ConfigError for a workspace that is
    not a directory, a mount path the engine cannot express, or a confined mount whose
    source left its directory (checked again here, right before the create, and
    pinned by `pins` until the container has started)."""
    limits = spec.limits
    return api.create_host_config(
        binds=binds(spec, pins),
        cap_drop=["ALL"],
        security_opt=security_options(),
        read_only=True,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmp_bytes},mode=1777"},
        shm_size=SHM_BYTES,
        init=True,
        mem_limit=limits.memory_bytes,
        memswap_limit=limits.memory_bytes,
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        log_config=LogConfig(
            type="json-file", config={"max-size": LOG_MAX_SIZE, "max-file": LOG_MAX_FILES}
        ),
        runtime=spec.runtime,
        ulimits=_ulimits(limits.disk.write_limit_bytes),
        group_add=[str(g) for g in spec.groups] or None,
    )


def binds(spec: SandboxSpec, pins: PinnedSources | None = None) -> list[str]:
    """The workspace (read-write, at /workspace) first, then the extra mounts (a
    confined one by its pinned path when `pins` can pin it)."""
    found = []
    for m in spec.mounts:
        source = m.source
        if m.confined_to is not None:
            if pins is not None:
                source = pins.pin(m.confined_to, m.source)
            else:
                check_confined(m.confined_to, m.source)
        found.append(_bind(source, m.target, m.read_only))
    if spec.workspace is not None:
        found.insert(0, _bind(workspace_dir(spec.workspace), WORKSPACE_TARGET, False))
    return found


def workspace_dir(workspace: Path) -> Path:
    resolved = workspace.resolve()
    if not resolved.is_dir():
        raise ConfigError(f"workspace {workspace} is not a directory; create it or pass another")
    return resolved


def _ulimits(file_size_bytes: int) -> list[Ulimit] | None:
    """RLIMIT_FSIZE (bytes) as the engine's `Ulimits`; None for no limit."""
    if not file_size_bytes:
        return None
    return [Ulimit(name="fsize", soft=file_size_bytes, hard=file_size_bytes)]


def _bind(source: Path, target: str, read_only: bool) -> str:
    if ":" in str(source) or ":" in target or not target.startswith("/"):
        raise ConfigError(
            f"cannot mount {source} at {target!r}: the target must be absolute and "
            "neither path may contain ':'"
        )
    return f"{source}:{target}:{'ro' if read_only else 'rw'}"
