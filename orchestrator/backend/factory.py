"""The one place a run's backend is built: the Docker engine's backend, wrapped in
what guards every sandbox it starts (`disk.DiskGuardedBackend`).

Every caller (a run, recovery, `warden cleanup`/`stop`/`exec`) gets its backend
here, and everything inside a run that starts sandboxes (the task manager, the warm
pool, the hook sandboxes) receives the run's, so no sandbox escapes the guard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.backend.disk import DiskGuardedBackend

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestrator.backend.contract import ContainerBackend
    from orchestrator.config import Settings


def make_backend(client: DockerClient, settings: Settings) -> ContainerBackend:
    """The local engine's backend (`client` from `backend.connect.connect`), guarded."""
    from orchestrator.backend.docker import DockerBackend

    return guarded(
        DockerBackend(client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid)
    )


def guarded(inner: ContainerBackend) -> ContainerBackend:
    """`inner` with its sandboxes watched for their disk limits (a backend a library
    caller brings, e.g. the fake, gets the same guard as the engine's)."""
    return DiskGuardedBackend(inner)
