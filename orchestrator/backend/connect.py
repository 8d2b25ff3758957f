"""Connecting to the Docker engine, with one clear error when it is not there, and what
the engine offers (`warden doctor`).

Every engine call warden makes goes through the docker SDK client built here
(`docker.DockerClient`, its low-level `.api`). Two things about that client matter:

- **Import time.** `import docker` pulls in `requests` and `urllib3` (~100-250 ms), so
  it is imported inside `connect()`, never at module level: `warden --help` and the
  CLI's argument parsing do not pay for it.
- **Connection pools under fan-out.** On a Unix socket the SDK keeps one urllib3 pool
  *per request URL* (every container id makes new ones) in an LRU of 25 pools, each
  holding up to `max_pool_size` connections (default 10). A pool evicted while more
  than `max_pool_size` of its connections are out fails the returning request with
  `'NoneType' object has no attribute 'qsize'`. The LRU's size cannot be set
  (docker 7.1 ignores `num_pools` for Unix sockets), so the pool is sized instead:
  with `max_pool_size` at least the number of calls in flight a pool is never full,
  and an evicted pool only closes its idle connections. `tests/integration/
  test_backend_fanout.py` runs 60 concurrent lifecycles on one client. (One client
  per worker thread would avoid the sharing too, but each keeps its own LRU of idle
  connections: up to 25 open sockets per thread, with a hundred wait threads.)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.errors import EngineUnavailableError

if TYPE_CHECKING:
    from docker import DockerClient

ENGINE_FIX = (
    "start the engine with `warden doctor --fix` (root on Debian: installs docker.io and "
    "starts dockerd), or point DOCKER_HOST at a running engine"
)
DEFAULT_SOCKET = "/var/run/docker.sock"
"""The engine's socket when DOCKER_HOST is unset."""
ROOTLESS_DOCS = "https://docs.docker.com/engine/security/rootless/"

CONNECT_TIMEOUT_S = 10
"""Per-request timeout of a client for calls that should answer quickly (`warden doctor`)."""
ENGINE_TIMEOUT_S = 60
"""Per-request timeout of a client that runs sandboxes: create, start and remove take
seconds on a busy engine. (Waiting for a container's exit has its own deadline.)"""
DEFAULT_POOL_SIZE = 10
"""Connections per pool for a client with few calls in flight (the SDK's default)."""
EXECUTOR_THREADS = 32
"""At most this many engine calls come from asyncio's default executor at once
(`asyncio.to_thread`: min(32, CPUs + 4) threads)."""


def pool_size(concurrent_calls: int) -> int:
    """`max_pool_size` for a client that has up to `concurrent_calls` calls of its own
    in flight, besides those from asyncio's default executor."""
    return max(DEFAULT_POOL_SIZE, concurrent_calls + EXECUTOR_THREADS)


REMOTE_ENGINE_REFUSED = (
    "DOCKER_HOST={host} names a remote engine, which warden does not support: every "
    "sandbox bind-mounts the workspace and its broker socket from this machine's file "
    "system, and a remote engine (tcp://, ssh://, a docker:dind service) would mount its "
    "own paths instead. Run warden on the engine's host: unset DOCKER_HOST, or point it "
    "at a local socket (unix:///var/run/docker.sock); in GitLab CI use a shell executor, "
    "or a docker executor with the host's socket mounted"
)


def connect(
    timeout_s: float = ENGINE_TIMEOUT_S, *, max_pool_size: int = DEFAULT_POOL_SIZE
) -> DockerClient:
    """A docker SDK client for the engine DOCKER_HOST names (the local socket when unset).

    `timeout_s` bounds each request; `max_pool_size` must be at least the number of
    calls the client has in flight at once (`pool_size()`). Negotiating the API version
    is the one round trip made here, and it is what proves the engine answers.
    Raises EngineUnavailableError, naming the fix, when it does not.
    """
    host = os.environ.get("DOCKER_HOST") or "unix://"
    if not host.startswith("unix://"):
        raise EngineUnavailableError(REMOTE_ENGINE_REFUSED.format(host=host[:200]))
    from docker import DockerClient  # deferred: importing the SDK costs start-up time
    from docker.errors import DockerException

    try:
        client = DockerClient.from_env(
            timeout=int(timeout_s), max_pool_size=max_pool_size, version="auto"
        )
    except DockerException as exc:
        raise EngineUnavailableError(engine_problem(host, _short(exc))) from exc
    # requests would look up proxy variables and ~/.netrc on every request; neither
    # applies to a Unix socket (1-5 ms per request here).
    client.api.trust_env = False
    return client


def connect_beside(
    timeout_s: float = ENGINE_TIMEOUT_S, *, max_pool_size: int = DEFAULT_POOL_SIZE
) -> Callable[[], DockerClient]:
    """`connect()` with its API version round trip left running in a thread, so the
    engine answers while the caller goes on (`warden exec` imports its own modules
    meanwhile); the returned function waits for the client, or raises what `connect`
    raised. The SDK is imported here first: an import is CPU under the GIL, and in
    the thread it would only hold up the caller."""
    import docker  # noqa: F401  (what the thread then needs is loaded)

    outcome: list[DockerClient | BaseException] = []

    def attempt() -> None:
        try:
            outcome.append(connect(timeout_s, max_pool_size=max_pool_size))
        except BaseException as exc:  # handed to the caller, raised there
            outcome.append(exc)

    worker = threading.Thread(target=attempt, name="warden-connect", daemon=True)
    worker.start()

    def client() -> DockerClient:
        worker.join()
        (done,) = outcome
        if isinstance(done, BaseException):
            raise done
        return done

    return client


def socket_path(host: str) -> str:
    """The file system path of a `unix://` DOCKER_HOST (the default socket for `unix://`)."""
    return host.removeprefix("unix://") or DEFAULT_SOCKET


def socket_state(path: str) -> str:
    """What a connect to the engine's socket meets: "answers" (something accepts),
    "absent" (no such file), "refused" (a socket nobody listens on: a stopped engine),
    "denied" (this user may not use it) or "other"."""
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(path)
    except FileNotFoundError:
        return "absent"
    except PermissionError:
        return "denied"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "other"
    finally:
        probe.close()
    return "answers"


def dockerd_installed() -> bool:
    import shutil

    return shutil.which("dockerd") is not None or os.path.exists("/usr/sbin/dockerd")


def engine_problem(host: str, detail: str, state: str | None = None) -> str:
    """Why the engine at `host` (a `unix://` DOCKER_HOST) did not answer, and the fix
    for that case: not installed, not running, no permission on its socket, or a
    socket that accepts but does not answer as an engine."""
    path = socket_path(host)
    state = state or socket_state(path)
    rootless = f"/run/user/{os.getuid()}/docker.sock"
    if state == "denied":
        other = (
            f"; a rootless engine's socket is at {rootless}: set DOCKER_HOST=unix://{rootless}"
            if os.getuid() != 0 and os.path.exists(rootless)
            else ""
        )
        return (
            f"the Docker engine's socket {path} refused this user (uid {os.getuid()}): "
            "permission denied. The engine runs, but only root and the `docker` group may "
            "use it: add yourself to that group (`sudo usermod -aG docker $USER`, then log "
            "in again or run `newgrp docker`; the group is root-equivalent on this host), "
            f"or use rootless Docker ({ROOTLESS_DOCS}) and point DOCKER_HOST at its socket, "
            f"or run warden as root{other}"
        )
    if state in ("absent", "refused") and not dockerd_installed():
        return (
            f"no Docker engine is installed here (no answer on {path}, no dockerd). As root "
            "on Debian or Ubuntu, `warden doctor --fix` installs docker.io and starts it; "
            "elsewhere install Docker Engine (https://docs.docker.com/engine/install/) or "
            f"rootless Docker ({ROOTLESS_DOCS}), then run `warden doctor`"
        )
    if state in ("absent", "refused"):
        return (
            f"the Docker engine is installed but not running (no answer on {path}): start it "
            "with `sudo systemctl start docker` or `sudo warden doctor --fix` (starts "
            "dockerd); for rootless Docker, `systemctl --user start docker` and "
            "DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock"
        )
    return f"the Docker engine does not answer on {path} ({detail}); {ENGINE_FIX}"


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # The SDK wraps the cause: "Error while fetching server API version: (...)".
    return text.removeprefix("Error while fetching server API version: ")[:200]


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


def engine_info(timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[EngineInfo, DockerClient | None]:
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
