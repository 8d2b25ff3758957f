"""Connecting to the Docker engine, with one clear error when it is not there, and what
the engine offers (`warden doctor`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
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


def connect_local(
    timeout_s: float = CONNECT_TIMEOUT_S, environ: Mapping[str, str] | None = None
) -> Any:
    """The thin stdlib client (`backend.engine_http.EngineClient`) when DOCKER_HOST is
    unset or `unix://…`; otherwise (TCP, TLS, ssh engines) `connect()`'s SDK client.

    Both stand where a `docker.DockerClient` would for `DockerBackend` (they have
    `.api`); only the thin one starts fast. Raises EngineUnavailableError, worded as
    `connect()` words it, when the engine does not answer.
    """
    from orchestrator.backend import engine_http

    path = engine_http.socket_path_from_env(os.environ if environ is None else environ)
    if path is None:
        return connect(timeout_s)
    client = engine_http.EngineClient(path, timeout_s)
    try:
        client.ping()
    except (
        engine_http.EngineConnectionError,
        engine_http.EngineReadTimeout,
        engine_http.EngineAPIError,
    ) as exc:
        raise EngineUnavailableError(
            f"the Docker engine does not answer ({_short(exc)}); {ENGINE_FIX}"
        ) from exc
    return client


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


# --- What the engine offers (`warden doctor`) ---------------------------------------

GVISOR_NOTE = (
    "gVisor (runsc) is an optional extra runtime; on these VMs it needs --ignore-cgroups, "
    "so memory and pids limits are NOT enforced under it"
)


@dataclass(frozen=True)
class EngineInfo:
    """The engine's answer to `version` and `info`, or why there was none."""

    reachable: bool
    version: str | None = None
    api_version: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    error: str | None = None


def engine_info(timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[EngineInfo, Any]:
    """(info, client); client is None when the engine does not answer."""
    try:
        client = connect(timeout_s)
    except EngineUnavailableError as exc:
        return EngineInfo(reachable=False, error=str(exc)), None
    version = client.version()
    details = client.info()
    info = EngineInfo(
        reachable=True,
        version=str(version.get("Version", "?")),
        api_version=str(version.get("ApiVersion", "?")),
        runtimes=tuple(sorted(details.get("Runtimes") or {})),
        default_runtime=details.get("DefaultRuntime"),
    )
    return info, client
