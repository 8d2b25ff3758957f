"""Connecting to the Docker engine, with one clear error when it is not there."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import EngineUnavailableError

ENGINE_FIX = (
    "start the engine with `warden doctor --fix` (root on Debian: installs docker.io and "
    "starts dockerd), or point DOCKER_HOST at a running engine"
)

CONNECT_TIMEOUT_S = 10
"""Per-request timeout of API calls that should answer quickly."""


def connect(timeout_s: float = CONNECT_TIMEOUT_S) -> Any:
    """A `docker.DockerClient` for the local engine (DOCKER_HOST honoured).

    Raises EngineUnavailableError, naming the fix, when the engine does not answer.
    """
    import docker  # deferred: importing the SDK costs start-up time
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except DockerException as exc:
        raise EngineUnavailableError(
            f"the Docker engine does not answer ({_short(exc)}); {ENGINE_FIX}"
        ) from exc
    return client


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
