"""The Docker backend: hardened one-container-per-sandbox on a Docker engine.

Drives the docker SDK's low-level client (`DockerClient.api`, an `APIClient`): one
call per step, no model objects, no inspect unless a non-zero exit needs explaining.
Each request is bounded by the client's timeout (`connect.ENGINE_TIMEOUT_S`), waiting
for an exit by the sandbox's deadline; failures are classified by `classify` and
idempotent calls retried on transient ones (tenacity). Output is read from an attach
stream opened before the container starts (`attach.OutputReader`).
Just over 400 lines, one idea: a sandbox's life on the engine, step by step.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from orchestrator import labels as wl
from orchestrator.backend import classify, hardening
from orchestrator.backend.attach import OutputReader
from orchestrator.backend.contract import (
    ContainerBackend,
    ContainerInfo,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
    parse_user,
    root_owned_note,
)
from orchestrator.backend.engine_json import (
    ContainerCreated,
    ContainerInspect,
    ContainerRow,
)
from orchestrator.backend.mounts import PinnedSources
from orchestrator.errors import (
    ConfigError,
    ContainerStartError,
    ImageNotFoundError,
)

if TYPE_CHECKING:
    from docker import APIClient, DockerClient

log = logging.getLogger("warden.backend")

T = TypeVar("T")

DEFAULT_HOME = "/tmp"
RETRY_ATTEMPTS = 5
"""Tries of an idempotent docker call before a transient error is final."""
RETRY_MAX_WAIT_S = 4.0
"""Longest jittered pause between two tries."""


NAME_PREFIX = "warden-"
"""Containers get a random name, so a create retried after a lost answer finds the first."""
KILL_GRACE_S = 15.0
"""After a kill, how long to wait for the engine to report the container exited."""
READER_JOIN_S = 5.0
"""After exit, how long the output reader may take to drain the attach stream."""
START_FAILURE_LOG_LINES = 50
KILL_SIGNAL_EXITS = frozenset({128 + 9, 128 + 15})
"""Exit codes of an init killed by SIGKILL / SIGTERM from outside."""
OUTSIDE_KILL_LOOKBACK_S = 3600.0
"""How far back the engine's events are read for a container whose start was not seen."""
MAX_KILL_EVENTS = 20
"""Most kill events read for one container."""


def outside_kill_reason(signals: list[str]) -> str:
    """Who killed a container from outside, from the signals of the engine's `kill`
    events (in order): `docker stop` sends SIGTERM (15) first, `docker kill` SIGKILL."""
    if not signals:
        return "killed from outside warden"
    if signals[0] == "15":
        return "stopped from outside warden by `docker stop` (SIGTERM, the engine's events say)"
    if signals[0] == "9":
        return "killed from outside warden by `docker kill` (SIGKILL, the engine's events say)"
    return (
        f"killed from outside warden by `docker kill --signal {signals[0]}` "
        "(the engine's events say)"
    )


class DockerBackend(ContainerBackend):
    """`ContainerBackend` on a docker SDK client (`backend.connect.connect()`, whose
    `max_pool_size` covers the calls made at once); only its `.api` is used.
    Thread-safe: sandboxes may be started, waited for and removed from many threads."""

    def __init__(self, client: DockerClient, *, state_dir: Path, fallback_uid: int) -> None:
        """`state_dir`: the state dir this process records to (its identity is in the
        owner labels every container carries); `fallback_uid`: the uid:gid a sandbox
        runs as when its workspace is root-owned or absent and its spec names no user."""
        self._api: APIClient = client.api
        self._state_dir = state_dir
        self._fallback_uid = fallback_uid
        self._readers: dict[str, OutputReader] = {}
        self._unpinning: dict[str, threading.Thread] = {}
        """Pinned mount sources being released after a start, joined by `remove`."""
        self._started_at: dict[str, float] = {}
        self._started_wall: dict[str, float] = {}
        self._killed: set[str] = set()
        self._warned_root_owned: set[Path] = set()
        self._owner: dict[str, str] | None = None
        self._lock = threading.Lock()

    def _describe(self, operation: str) -> str:
        """An engine call and the timeout it had, for error messages."""
        return f"{operation} (timeout {self._api.timeout:g} s)"

    # -- start -------------------------------------------------------------------

    def start(self, spec: SandboxSpec) -> str:
        # Confined mount sources stay pinned until the engine has mounted them (at
        # start). Their release (umount waits on the kernel, ~25 ms) then runs in a
        # thread beside the sandbox, off `warden exec`'s path; `remove` joins it.
        pins = PinnedSources()
        try:
            container_id = self._start(spec, pins)
        except BaseException:
            pins.release()
            raise
        if pins.held:
            release = threading.Thread(target=pins.release, name="warden-unpin", daemon=True)
            with self._lock:  # started before `remove` (another thread: a stop) can join it
                self._unpinning[container_id] = release
                release.start()
        return container_id

    def _start(self, spec: SandboxSpec, pins: PinnedSources) -> str:
        container_labels = self._labels(spec)
        user = self._user(spec)
        host_config = hardening.host_config(self._api, spec, pins)
        with classify.engine_errors(self._describe("create")):
            name = NAME_PREFIX + secrets.token_hex(10)

            def create() -> ContainerCreated:
                created: ContainerCreated = self._api.create_container(
                    spec.image,
                    # The command replaces the image's entrypoint: a project image's
                    # ENTRYPOINT never runs before (or around) warden's command.
                    entrypoint=spec.command[:1],
                    command=spec.command[1:],
                    user=user,
                    environment={"HOME": DEFAULT_HOME, **spec.env},
                    labels=container_labels,
                    working_dir=spec.workdir,
                    network_disabled=True,
                    host_config=host_config,
                    name=name,
                )
                return created

            try:
                container_id = self._create(create, name, container_labels)
            except Exception as exc:
                if classify.status_code(exc) == 404:
                    raise ImageNotFoundError(
                        f"image {spec.image!r} does not exist on this engine; build it "
                        "with `warden images build` (no registry is used)"
                    ) from exc
                raise
        try:
            reader = OutputReader(self._api, container_id, spec.output_limit_bytes)
            with self._lock:
                self._readers[container_id] = reader
            self._started_at[container_id] = time.monotonic()
            self._started_wall[container_id] = time.time()
            # Starting a started container is a no-op (304): start may be retried.
            self._retrying(lambda: self._api.start(container_id))
        except Exception as exc:
            self._fail_start(container_id, spec, exc)
        return container_id

    def _create(
        self, create: Callable[[], ContainerCreated], name: str, labels: dict[str, str]
    ) -> str:
        """Create, retried on transient errors; a try whose answer was lost is found
        by its name (and session label) instead of creating a second container."""

        def attempt() -> str:
            try:
                created = create()
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
            found: ContainerInspect = self._api.inspect_container(name)
        except Exception as exc:
            if classify.status_code(exc) == 404:
                return None
            raise
        mine = (found.get("Config") or {}).get("Labels") or {}
        if mine.get(wl.SESSION) != labels.get(wl.SESSION):
            return None
        return str(found["Id"])

    def _fail_start(self, container_id: str, spec: SandboxSpec, exc: Exception) -> None:
        unavailable = classify.unavailable(exc, self._describe("start"))
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
            from orchestrator import owner

            self._owner = owner.current(self._state_dir).labels()
        return self._owner

    def _user(self, spec: SandboxSpec) -> str:
        fallback = self._fallback_uid
        if spec.user is not None:
            uid, gid = parse_user(spec.user)  # the spec validated it; re-check anyway
            return f"{uid}:{gid}"
        if spec.workspace is None:
            return f"{fallback}:{fallback}"
        workspace = hardening.workspace_dir(spec.workspace)
        owner = workspace.stat()
        if owner.st_uid == 0:
            if workspace not in self._warned_root_owned:
                self._warned_root_owned.add(workspace)
                log.warning("%s", root_owned_note(workspace, fallback))
            return f"{fallback}:{fallback}"
        return f"{owner.st_uid}:{owner.st_gid or fallback}"

    # -- wait --------------------------------------------------------------------

    def wait(self, container_id: str, timeout_s: float | None) -> SandboxResult:
        timed_out = False
        with classify.engine_errors():
            try:
                exit_code = self._wait_exit_code(container_id, timeout_s)
            except _Gone:
                return self._removed(container_id)
            except _WaitTimeout:
                timed_out = True
                self.kill(container_id)
                try:
                    exit_code = self._wait_exit_code(container_id, KILL_GRACE_S)
                except (_WaitTimeout, _Gone):
                    exit_code = 128 + 9  # killed, but the engine is slow to say so
        ended = time.monotonic()
        status = self._status(container_id, exit_code, timed_out)
        started = self._started_at.pop(container_id, ended)
        started_wall = self._started_wall.pop(container_id, None)
        reason = ""
        if status is SandboxStatus.KILLED_OUTSIDE:
            reason = self._who_killed(container_id, started_wall)
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
            reason=reason,
        )

    def _who_killed(self, container_id: str, since: float | None) -> str:
        """What the engine's events say killed the container from outside: `docker stop`
        (SIGTERM first) or `docker kill` (another signal); "" when they do not tell."""
        now = time.time()
        signals: list[str] = []
        try:
            # Whole seconds (the SDK's type); an `until` just ahead makes the engine
            # wait out the current second (< 1 s, only for a container killed outside).
            events = self._api.events(
                since=int(since if since is not None else now - OUTSIDE_KILL_LOOKBACK_S),
                until=int(now) + 1,
                filters={"container": container_id, "type": "container", "event": "kill"},
                decode=True,
            )
            for event in events:
                actor = event.get("Actor") if isinstance(event, dict) else None
                attributes = actor.get("Attributes") if isinstance(actor, dict) else None
                signal = attributes.get("signal") if isinstance(attributes, dict) else None
                if isinstance(signal, str) and signal.isdigit():
                    signals.append(signal)
                if len(signals) >= MAX_KILL_EVENTS:
                    break
        except Exception:  # the events are a nicety; the status stands without them
            log.debug("could not read the engine's events for %s", container_id, exc_info=True)
        return outside_kill_reason(signals)

    def _wait_exit_code(self, container_id: str, timeout_s: float | None) -> int:
        """The exit code, once the container has exited; `_WaitTimeout` when it still runs
        after `timeout_s` (whole seconds: the SDK's wait timeout is an int, so a deadline
        is rounded up), `_Gone` when it was removed. A broken connection is retried: the
        wait is idempotent."""
        timeout = None if timeout_s is None else math.ceil(timeout_s)
        try:
            answer = self._retrying(
                lambda: self._api.wait(container_id, timeout=timeout),
                retryable=classify.is_connection_error,
            )
        except Exception as exc:
            if classify.is_read_timeout(exc):
                raise _WaitTimeout from exc
            if classify.status_code(exc) == 404:
                raise _Gone from exc
            raise
        return answer["StatusCode"]

    def _status(self, container_id: str, exit_code: int, timed_out: bool) -> SandboxStatus:
        if timed_out:
            return SandboxStatus.TIMED_OUT
        if container_id in self._killed:
            return SandboxStatus.KILLED
        if exit_code == 0:
            return SandboxStatus.OK
        # Only a failure needs the extra round trip to tell OOM from the rest.
        try:
            state = self._inspect(container_id).get("State", {})
        except Exception as exc:
            if classify.status_code(exc) == 404:
                return SandboxStatus.REMOVED  # removed from outside while it ran
            raise
        if state.get("Status") in ("removing", "dead"):
            return SandboxStatus.REMOVED  # `docker rm -f` from outside
        if state.get("OOMKilled"):
            return SandboxStatus.OOM_KILLED
        if exit_code in KILL_SIGNAL_EXITS:
            return SandboxStatus.KILLED_OUTSIDE  # this backend's own kills returned above
        return SandboxStatus.ERROR

    def host_pid(self, container_id: str) -> int | None:
        """The init's host PID, if the engine runs on this host: checked by finding
        the container id in that process's cgroups (a remote engine's PID would name
        some unrelated local process)."""
        with classify.engine_errors(self._describe("inspect")):
            state = self._inspect(container_id).get("State", {})
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
        self._started_wall.pop(container_id, None)
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
        with classify.engine_errors(self._describe("kill")), classify.tolerate_gone():
            self._retrying(lambda: self._api.kill(container_id))

    def remove(self, container_id: str) -> None:
        with self._lock:
            reader = self._readers.pop(container_id, None)
            unpinning = self._unpinning.pop(container_id, None)
        if unpinning is not None:
            unpinning.join()
        self._started_at.pop(container_id, None)
        self._started_wall.pop(container_id, None)
        self._killed.discard(container_id)
        with classify.engine_errors(self._describe("remove")), classify.tolerate_gone():
            self._retrying(lambda: self._api.remove_container(container_id, force=True, v=True))
        if reader is not None:
            reader.close()

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        selectors = [key if value is None else f"{key}={value}" for key, value in labels.items()]
        with classify.engine_errors(self._describe("list")):
            rows: list[ContainerRow] = self._retrying(
                lambda: self._api.containers(all=True, filters={"label": selectors})
            )
        return [
            ContainerInfo(
                id=row["Id"],
                name=(row.get("Names") or ["/"])[0].lstrip("/"),
                status=row.get("State") or row.get("Status") or "",
                labels=row.get("Labels") or {},
            )
            for row in rows
        ]

    def _inspect(self, container_id: str) -> ContainerInspect:
        found: ContainerInspect = self._retrying(lambda: self._api.inspect_container(container_id))
        return found

    def _retrying(
        self,
        call: Callable[[], T],
        retryable: Callable[[BaseException], bool] = classify.is_transient,
    ) -> T:
        """Run `call`; retry it, with jittered backoff, on `retryable` (transient) errors."""
        try:
            return call()
        except Exception as exc:
            if not retryable(exc):
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
            retry=retry_if_exception(retryable),
            before=lambda _state: time.sleep(0.05),
            reraise=True,
        )
        return retrying(call)


class _WaitTimeout(Exception):
    pass


class _Gone(Exception):
    """The container no longer exists (removed from outside)."""
