"""The Docker backend: hardened one-container-per-sandbox on a local engine.

Uses a low-level API client (`client.api`) only: the docker SDK's `APIClient`, or the
thin stdlib `engine_http.EngineClient` with the same methods (what `warden exec` uses
on a local engine). One call per step, no model objects, no inspect unless a non-zero
exit needs explaining. Failures are classified by `classify`, for either transport. Output is read
from an attach stream opened before the container starts, in a reader thread,
through a bounded head+tail capture.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from orchestrator import labels as wl
from orchestrator.backend import classify
from orchestrator.backend.base import (
    ContainerBackend,
    ContainerInfo,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
    parse_user,
)
from orchestrator.backend.capture import OutputCapture
from orchestrator.backend.engine_http import iter_frames
from orchestrator.backend.mounts import check_confined
from orchestrator.config import Settings
from orchestrator.errors import (
    ConfigError,
    ContainerStartError,
    ImageNotFoundError,
)

log = logging.getLogger("warden.backend")

T = TypeVar("T")

WORKSPACE_TARGET = "/workspace"
DEFAULT_HOME = "/tmp"
LOG_MAX_SIZE = "1m"
"""json-file log cap per container (output is captured over attach, not from logs)."""
LOG_MAX_FILES = "1"
SHM_BYTES = 16 * 1024 * 1024
"""Size of /dev/shm (the other writable tmpfs besides /tmp)."""
RETRY_ATTEMPTS = 5
"""Tries of an idempotent docker call before a transient error is final."""
RETRY_MAX_WAIT_S = 4.0
"""Longest jittered pause between two tries."""


class EngineOp(NamedTuple):
    """One kind of engine call, with the per-request timeout sized to it."""

    name: str
    timeout_s: float
    constant: str

    def describe(self) -> str:
        return f"{self.name} ({self.constant} = {self.timeout_s:g} s)"


CREATE = EngineOp("create", 60.0, "CREATE_TIMEOUT_S")
"""Create a container (and open its attach stream); a busy engine takes seconds."""
START = EngineOp("start", 60.0, "START_TIMEOUT_S")
"""Start a container: mounts, namespaces, cgroups, the init process."""
INSPECT = EngineOp("inspect", 30.0, "INSPECT_TIMEOUT_S")
"""Inspect or list containers: reads only."""
KILL = EngineOp("kill", 30.0, "KILL_TIMEOUT_S")
REMOVE = EngineOp("remove", 60.0, "REMOVE_TIMEOUT_S")
"""Remove a container and its anonymous volumes."""
NAME_PREFIX = "warden-"
"""Containers get a random name, so a create retried after a lost answer finds the first."""
KILL_GRACE_S = 15.0
"""After a kill, how long to wait for the engine to report the container exited."""
READER_JOIN_S = 5.0
"""After exit, how long the output reader may take to drain the attach stream."""
START_FAILURE_LOG_LINES = 50
KILL_SIGNAL_EXITS = frozenset({128 + 9, 128 + 15})
"""Exit codes of an init killed by SIGKILL / SIGTERM from outside."""


class DockerBackend(ContainerBackend):
    """`ContainerBackend` on an engine client: a docker SDK `DockerClient`
    (`orchestrator.backend.connect.connect()`) or the thin `EngineClient`
    (`orchestrator.backend.connect.connect_local()`); only its `.api` is used."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self._api = client.api
        self._settings = settings
        self._readers: dict[str, _Reader] = {}
        self._started_at: dict[str, float] = {}
        self._killed: set[str] = set()
        self._warned_root_owned: set[Path] = set()
        self._owner: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._timed_apis: dict[float, Any] = {}

    def _timed(self, op: EngineOp) -> Any:
        """The API client with `op`'s timeout. The thin client copies itself cheaply;
        the docker SDK's has one timeout per client, so it keeps its own."""
        with_timeout = getattr(self._api, "with_timeout", None)
        if with_timeout is None:
            return self._api
        with self._lock:
            if op.timeout_s not in self._timed_apis:
                self._timed_apis[op.timeout_s] = with_timeout(op.timeout_s)
            return self._timed_apis[op.timeout_s]

    # -- start -------------------------------------------------------------------

    def start(self, spec: SandboxSpec) -> str:
        container_labels = self._labels(spec)
        user = self._user(spec)
        for mount in spec.mounts:
            if mount.confined_to is not None:
                check_confined(mount.confined_to, mount.source)
        binds = [_bind(m.source, m.target, m.read_only) for m in spec.mounts]
        if spec.workspace is not None:
            binds.insert(0, _bind(_workspace_dir(spec.workspace), WORKSPACE_TARGET, False))
        limits = spec.limits
        with classify.engine_errors(CREATE.describe()):
            host_config = self._api.create_host_config(
                binds=binds,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmp_bytes},mode=1777"},
                shm_size=SHM_BYTES,
                init=True,
                mem_limit=limits.memory_bytes,
                memswap_limit=limits.memory_bytes,
                nano_cpus=int(limits.cpus * 1e9),
                pids_limit=limits.pids,
                log_config={
                    "type": "json-file",
                    "config": {"max-size": LOG_MAX_SIZE, "max-file": LOG_MAX_FILES},
                },
                runtime=spec.runtime,
                ulimits=_ulimits(limits.disk.write_limit_bytes),
            )
            try:
                container_id = self._create(
                    spec.image,
                    command=spec.command,
                    user=user,
                    environment={"HOME": DEFAULT_HOME, **spec.env},
                    labels=container_labels,
                    working_dir=spec.workdir,
                    network_disabled=True,
                    host_config=host_config,
                    name=NAME_PREFIX + secrets.token_hex(10),
                )
            except Exception as exc:
                if classify.status_code(exc) == 404:
                    raise ImageNotFoundError(
                        f"image {spec.image!r} does not exist on this engine; build it "
                        "with `warden images build` (no registry is used)"
                    ) from exc
                raise
        try:
            reader = _Reader(self._timed(CREATE), container_id, spec.output_limit_bytes)
            with self._lock:
                self._readers[container_id] = reader
            self._started_at[container_id] = time.monotonic()
            # Starting a started container is a no-op (304): start may be retried.
            self._retrying(lambda: self._timed(START).start(container_id))
        except Exception as exc:
            self._fail_start(container_id, spec, exc)
        return container_id

    def _create(self, image: str, *, name: str, labels: dict[str, str], **options: Any) -> str:
        """Create, retried on transient errors; a try whose answer was lost is found
        by its name (and session label) instead of creating a second container."""
        api = self._timed(CREATE)

        def attempt() -> str:
            try:
                created = api.create_container(image, name=name, labels=labels, **options)
            except Exception as exc:
                if classify.is_transient(exc) or classify.status_code(exc) == 409:
                    found = self._created_earlier(name, labels)
                    if found is not None:
                        return found
                raise
            return str(created["Id"])

        return self._retrying(attempt)

    def _created_earlier(self, name: str, labels: Mapping[str, str]) -> str | None:
        try:
            found = self._timed(INSPECT).inspect_container(name)
        except Exception as exc:
            if classify.status_code(exc) == 404:
                return None
            raise
        mine = (found.get("Config") or {}).get("Labels") or {}
        if mine.get(wl.SESSION) != labels.get(wl.SESSION):
            return None
        return str(found["Id"])

    def _fail_start(self, container_id: str, spec: SandboxSpec, exc: Exception) -> None:
        unavailable = classify.unavailable(exc, START.describe())
        if unavailable is not None:
            with contextlib.suppress(Exception):
                self.remove(container_id)
            raise unavailable from exc
        error = ContainerStartError(
            f"container for {spec.command[0]!r} in image {spec.image!r} failed to start: "
            f"{classify.explain(exc)}; fix what the engine names (e.g. a mount source, the runtime, "
            "the image's entrypoint) and try again"
        )
        with contextlib.suppress(Exception):
            logs = self._api.logs(container_id, tail=START_FAILURE_LOG_LINES)
            if logs:
                error.add_note("container logs:\n" + logs.decode("utf-8", "replace"))
        with contextlib.suppress(Exception):
            self.remove(container_id)
        raise error from exc

    def _labels(self, spec: SandboxSpec) -> dict[str, str]:
        wl.check_user_labels(spec.labels)
        if wl.SESSION not in spec.warden_labels:
            raise ConfigError(
                "a sandbox needs a warden.session label so `warden cleanup` can find it; "
                "build SandboxSpec.warden_labels with labels.warden_labels(session, ...)"
            )
        own = dict(spec.warden_labels)
        own.setdefault(wl.VERSION, wl.warden_labels("-")[wl.VERSION])
        # Who owns it: cleanup and recovery remove it only once this process is dead.
        for key, value in self._owner_labels().items():
            own.setdefault(key, value)
        return {**spec.labels, **own}

    def _owner_labels(self) -> dict[str, str]:
        if self._owner is None:
            from orchestrator.lifecycle import owner

            self._owner = owner.current(self._settings.state_dir).labels()
        return self._owner

    def _user(self, spec: SandboxSpec) -> str:
        fallback = self._settings.fallback_uid
        if spec.user is not None:
            uid, gid = parse_user(spec.user)  # the spec validated it; re-check anyway
            return f"{uid}:{gid}"
        if spec.workspace is None:
            return f"{fallback}:{fallback}"
        workspace = _workspace_dir(spec.workspace)
        owner = workspace.stat()
        if owner.st_uid == 0:
            if workspace not in self._warned_root_owned:
                self._warned_root_owned.add(workspace)
                log.warning(
                    "workspace %s is owned by root; the sandbox runs as uid:gid %d:%d "
                    "(never root), so it cannot write files that only root may write. "
                    "Fix: chown the workspace to an unprivileged user, or pass --user UID:GID.",
                    workspace,
                    fallback,
                    fallback,
                )
            return f"{fallback}:{fallback}"
        return f"{owner.st_uid}:{owner.st_gid or fallback}"

    # -- wait --------------------------------------------------------------------

    def wait(self, container_id: str, timeout_s: float | None) -> SandboxResult:
        timed_out = False
        with classify.engine_errors():
            try:
                exit_code = _wait_exit_code(self._api, container_id, timeout_s)
            except _Gone:
                return self._removed(container_id)
            except _WaitTimeout:
                timed_out = True
                self.kill(container_id)
                try:
                    exit_code = _wait_exit_code(self._api, container_id, KILL_GRACE_S)
                except (_WaitTimeout, _Gone):
                    exit_code = 128 + 9  # killed, but the engine is slow to say so
        ended = time.monotonic()
        status = self._status(container_id, exit_code, timed_out)
        started = self._started_at.pop(container_id, ended)
        with self._lock:
            reader = self._readers.pop(container_id, None)
        stdout = stderr = ""
        truncated = False
        if reader is not None:
            reader.finish(READER_JOIN_S)
            stdout, stderr = reader.stdout.text(), reader.stderr.text()
            truncated = reader.stdout.truncated or reader.stderr.truncated
        return SandboxResult(
            status=status,
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            truncated=truncated,
            duration_s=ended - started,
        )

    def _status(self, container_id: str, exit_code: int, timed_out: bool) -> SandboxStatus:
        if timed_out:
            return SandboxStatus.TIMED_OUT
        if container_id in self._killed:
            return SandboxStatus.KILLED
        if exit_code == 0:
            return SandboxStatus.OK
        # Only a failure needs the extra round trip to tell OOM from the rest.
        try:
            state = self._idempotent(INSPECT, "inspect_container", container_id)["State"]
        except Exception as exc:
            if classify.status_code(exc) == 404:
                return SandboxStatus.REMOVED  # removed from outside while it ran
            raise
        if state.get("Status") in ("removing", "dead"):
            return SandboxStatus.REMOVED  # `docker rm -f` from outside
        if state.get("OOMKilled"):
            return SandboxStatus.OOM_KILLED
        if exit_code in KILL_SIGNAL_EXITS:
            return SandboxStatus.KILLED
        return SandboxStatus.ERROR

    def host_pid(self, container_id: str) -> int | None:
        """The init's host PID, if the engine runs on this host: checked by finding
        the container id in that process's cgroups (a remote engine's PID would name
        some unrelated local process)."""
        with classify.engine_errors(INSPECT.describe()):
            state = self._idempotent(INSPECT, "inspect_container", container_id)["State"]
        pid = state.get("Pid")
        if not isinstance(pid, int) or pid <= 0:
            return None
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return None
        return pid if container_id in cgroups else None

    def _removed(self, container_id: str) -> SandboxResult:
        """The result for a container that vanished before `wait` saw it exit."""
        started = self._started_at.pop(container_id, time.monotonic())
        with self._lock:
            reader = self._readers.pop(container_id, None)
        if reader is not None:
            reader.close()
        return SandboxResult(
            status=SandboxStatus.REMOVED,
            exit_code=128 + 9,
            stdout="",
            stderr="",
            truncated=False,
            duration_s=time.monotonic() - started,
        )

    # -- kill, remove, list ------------------------------------------------------

    def kill(self, container_id: str) -> None:
        self._killed.add(container_id)
        with classify.engine_errors(KILL.describe()), classify.tolerate_gone():
            self._idempotent(KILL, "kill", container_id)

    def remove(self, container_id: str) -> None:
        with self._lock:
            reader = self._readers.pop(container_id, None)
        self._started_at.pop(container_id, None)
        self._killed.discard(container_id)
        with classify.engine_errors(REMOVE.describe()), classify.tolerate_gone():
            self._idempotent(REMOVE, "remove_container", container_id, force=True, v=True)
        if reader is not None:
            reader.close()

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        selectors = [key if value is None else f"{key}={value}" for key, value in labels.items()]
        with classify.engine_errors(INSPECT.describe()):
            rows = self._idempotent(INSPECT, "containers", all=True, filters={"label": selectors})
        return [
            ContainerInfo(
                id=row["Id"],
                name=(row.get("Names") or ["/"])[0].lstrip("/"),
                status=row.get("State") or row.get("Status") or "",
                labels=row.get("Labels") or {},
            )
            for row in rows
        ]

    def _idempotent(self, op: EngineOp, method: str, *args: Any, **kwargs: Any) -> Any:
        """An idempotent API call with `op`'s timeout, retried on transient errors."""
        call = getattr(self._timed(op), method)
        return self._retrying(lambda: call(*args, **kwargs))

    def _retrying(self, call: Callable[[], T]) -> T:
        """Run `call`; retry it, with jittered backoff, on transient errors."""
        try:
            return call()
        except Exception as exc:
            if not classify.is_transient(exc):
                raise
        # Imported only on the slow path: tenacity costs CLI start-up time.
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_attempt,
            wait_random_exponential,
        )

        retrying = Retrying(
            stop=stop_after_attempt(RETRY_ATTEMPTS - 1),
            wait=wait_random_exponential(multiplier=0.1, max=RETRY_MAX_WAIT_S),
            retry=retry_if_exception(classify.is_transient),
            before=lambda _state: time.sleep(0.05),
            reraise=True,
        )
        return retrying(call)


class _Reader:
    """Reads the attach stream of one container into two bounded captures."""

    def __init__(self, api: Any, container_id: str, limit: int) -> None:
        self.stdout = OutputCapture("stdout", limit)
        self.stderr = OutputCapture("stderr", limit)
        self._sock = api.attach_socket(container_id, params={"stdout": 1, "stderr": 1, "stream": 1})
        for candidate in (self._sock, getattr(self._sock, "_sock", None)):
            settimeout = getattr(candidate, "settimeout", None)
            if settimeout is not None:
                settimeout(None)  # a quiet sandbox is not an error
        self._thread = threading.Thread(
            target=self._run, name=f"warden-output-{container_id[:12]}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        captures = {1: self.stdout, 2: self.stderr}
        # A socket (thin client, tests) has recv; the SDK's SocketIO wrapper has read.
        recv = getattr(self._sock, "recv", None) or self._sock.read
        with contextlib.suppress(OSError, ValueError):
            for stream, data in iter_frames(recv):
                capture = captures.get(stream)
                if capture is not None:
                    capture.feed(data)

    def finish(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        self.close()

    def close(self) -> None:
        # The SDK hands back the stream wrapper; the socket and response under it
        # must be closed too, or the descriptor lingers until garbage collection.
        response = getattr(self._sock, "_response", None)
        for closable in (response, self._sock, getattr(self._sock, "_sock", None)):
            close = getattr(closable, "close", None)
            if close is not None:
                with contextlib.suppress(OSError, ValueError):
                    close()


class _WaitTimeout(Exception):
    pass


class _Gone(Exception):
    """The container no longer exists (removed from outside)."""


def _wait_exit_code(api: Any, container_id: str, timeout_s: float | None) -> int:
    try:
        answer = api.wait(container_id, timeout=timeout_s)
    except Exception as exc:
        if classify.is_read_timeout(exc):
            raise _WaitTimeout from exc
        if classify.status_code(exc) == 404:
            raise _Gone from exc
        raise
    code = answer.get("StatusCode")
    return int(code) if code is not None else -1


def _ulimits(file_size_bytes: int) -> list[dict[str, Any]] | None:
    """RLIMIT_FSIZE (bytes) as the engine's `Ulimits`; None for no limit."""
    if not file_size_bytes:
        return None
    return [{"Name": "fsize", "Soft": file_size_bytes, "Hard": file_size_bytes}]


def _bind(source: Path, target: str, read_only: bool) -> str:
    if ":" in str(source) or ":" in target or not target.startswith("/"):
        raise ConfigError(
            f"cannot mount {source} at {target!r}: the target must be absolute and "
            "neither path may contain ':'"
        )
    return f"{source}:{target}:{'ro' if read_only else 'rw'}"


def _workspace_dir(workspace: Path) -> Path:
    resolved = workspace.resolve()
    if not resolved.is_dir():
        raise ConfigError(f"workspace {workspace} is not a directory; create it or pass another")
    return resolved
