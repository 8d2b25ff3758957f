"""Locks in what DockerBackend asks the engine for, without an engine: the hardened
container settings, the user it picks (never root, with a warning for a root-owned
workspace), statuses from exit codes, retries only on transient errors, "already
gone" tolerated, and clear errors for a dead engine, a missing image and a failed
start."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import requests
from docker.errors import APIError

from orchestrator import labels as wl
from orchestrator.backend.contract import SandboxSpec, SandboxStatus
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import DEFAULT_FALLBACK_UID, Settings
from orchestrator.errors import (
    ConfigError,
    ContainerStartError,
    EngineSlowError,
    EngineUnavailableError,
    ImageNotFoundError,
)


def api_error(code: int, text: str = "boom") -> APIError:
    response = requests.Response()
    response.status_code = code
    return APIError(text, response=response, explanation=text)


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


class StubAttachResponse:
    """What the SDK client's session answers an attach with: the raw stream's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.raw = sock

    def raise_for_status(self) -> None:
        pass

    def close(self) -> None:
        self.raw.close()


class StubAPI:
    """Records calls; each method's behaviour can be scripted per test."""

    base_url = "http+docker://localhost"
    api_version = "1.41"
    timeout = 60

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.output = frame(1, b"out\n") + frame(2, b"err\n")
        self.exit_code = 0
        self.oom = False
        self.failures: dict[str, list[BaseException]] = {}
        self._sockets: list[socket.socket] = []

    def _record(self, method: str, /, *args: Any, **kwargs: Any) -> None:
        self.calls.append((method, args, kwargs))
        pending = self.failures.get(method)
        if pending:
            raise pending.pop(0)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def create_host_config(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs

    def create_container(self, image: str, **kwargs: Any) -> dict[str, str]:
        self._record("create_container", image, **kwargs)
        return {"Id": "c1"}

    def post(self, url: str, **kwargs: Any) -> StubAttachResponse:
        container_id = url.split("/containers/")[1].removesuffix("/attach")
        self._record("attach", container_id)
        ours, theirs = socket.socketpair()
        theirs.sendall(self.output)
        theirs.close()
        self._sockets.append(ours)
        return StubAttachResponse(ours)

    def start(self, container_id: str) -> None:
        self._record("start", container_id)

    def wait(self, container_id: str, timeout: float | None = None) -> dict[str, int]:
        self._record("wait", container_id, timeout=timeout)
        return {"StatusCode": self.exit_code}

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self._record("inspect_container", container_id)
        return {"State": {"OOMKilled": self.oom}}

    def kill(self, container_id: str) -> None:
        self._record("kill", container_id)

    def remove_container(self, container_id: str, **kwargs: Any) -> None:
        self._record("remove_container", container_id, **kwargs)

    def containers(self, **kwargs: Any) -> list[dict[str, Any]]:
        self._record("containers", **kwargs)
        return [{"Id": "c9", "Names": ["/n9"], "State": "running", "Labels": {"a": "b"}}]

    def logs(self, container_id: str, **kwargs: Any) -> bytes:
        self._record("logs", container_id)
        return b"exec /nope: no such file or directory\n"

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


class StubClient:
    def __init__(self) -> None:
        self.api = StubAPI()


@pytest.fixture
def api() -> Any:
    stub = StubClient()
    yield stub.api
    stub.api.close()


@pytest.fixture
def backend(api: StubAPI, settings: Settings) -> DockerBackend:
    client = StubClient()
    client.api = api
    return DockerBackend(client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid)


def spec(workspace: Path | None = None, **overrides: Any) -> SandboxSpec:
    values: dict[str, Any] = {
        "image": "img",
        "command": ["run", "it"],
        "workspace": workspace,
        "labels": {"team": "x"},
        "warden_labels": wl.warden_labels("s1", exec="e1"),
    }
    values.update(overrides)
    return SandboxSpec(**values)


def test_container_is_hardened(backend: DockerBackend, api: StubAPI, workspace: Path) -> None:
    result = backend.run(spec(workspace))
    assert api.names() == ["create_container", "attach", "start", "wait", "remove_container"]
    created = api.calls[0][2]
    host = created["host_config"]
    assert created["network_disabled"] is True
    assert host["cap_drop"] == ["ALL"] and host["security_opt"][0] == "no-new-privileges"
    (profile,) = [o for o in host["security_opt"] if o.startswith("seccomp=")]
    assert json.loads(profile[len("seccomp="):])["defaultAction"] == "SCMP_ACT_ERRNO"
    assert host["read_only"] is True and host["init"] is True
    assert host["mem_limit"] == host["memswap_limit"] == 512 * 1024 * 1024
    assert host["nano_cpus"] == 1_000_000_000 and host["pids_limit"] == 256
    assert "size=67108864" in host["tmpfs"]["/tmp"] and "mode=1777" in host["tmpfs"]["/tmp"]
    assert host["log_config"]["Config"]["max-size"] and host["log_config"]["Type"] == "json-file"
    assert host["binds"] == [f"{workspace.resolve()}:/workspace:rw"]
    from orchestrator import owner

    assert created["labels"] == {
        "team": "x", wl.SESSION: "s1", wl.EXEC: "e1", wl.VERSION: wl.warden_labels("s")[wl.VERSION],
        **owner.current(backend._state_dir).labels(),  # who owns it, for cleanup
    }  # fmt: skip
    assert created["environment"]["HOME"] == "/tmp"
    assert created["working_dir"] == "/workspace"
    assert (result.stdout, result.stderr, result.status) == ("out\n", "err\n", SandboxStatus.OK)
    assert api.calls[-1][2] == {"force": True, "v": True}


def test_runs_as_workspace_owner(backend: DockerBackend, api: StubAPI, tmp_path: Path) -> None:
    owned = tmp_path / "owned"
    owned.mkdir()
    os.chown(owned, 4321, 765)
    backend.run(spec(owned))
    assert api.calls[0][2]["user"] == "4321:765"


def test_root_owned_workspace_uses_fallback_and_warns_once(
    backend: DockerBackend, api: StubAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root_owned = tmp_path / "root"
    root_owned.mkdir()
    os.chown(root_owned, 0, 0)
    with caplog.at_level(logging.WARNING, logger="warden.backend"):
        backend.run(spec(root_owned))
        backend.run(spec(root_owned))
    fallback = f"{DEFAULT_FALLBACK_UID}:{DEFAULT_FALLBACK_UID}"  # no host account's uid
    assert [c[2]["user"] for c in api.calls if c[0] == "create_container"] == [fallback] * 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "owned by root" in warnings[0] and "chown" in warnings[0] and "--user" in warnings[0]


def test_explicit_user_and_root_refused(backend: DockerBackend, api: StubAPI) -> None:
    backend.run(spec(user="2000:3000"))
    assert api.calls[0][2]["user"] == "2000:3000"
    for root in ("0", "0:0", "5:0", "root", "1000:staff"):
        with pytest.raises(ValueError, match=r"root|numeric"):
            spec(user=root)


@pytest.mark.parametrize(
    ("exit_code", "oom", "status", "inspected"),
    [
        (0, False, SandboxStatus.OK, False),
        (3, False, SandboxStatus.ERROR, True),
        (137, True, SandboxStatus.OOM_KILLED, True),
        (137, False, SandboxStatus.KILLED_OUTSIDE, True),
    ],
)
def test_status_from_exit(
    backend: DockerBackend, api: StubAPI, exit_code: int, oom: bool, status: SandboxStatus,
    inspected: bool,
) -> None:  # fmt: skip
    api.exit_code, api.oom = exit_code, oom
    result = backend.run(spec())
    assert (result.status, result.exit_code) == (status, exit_code)
    assert ("inspect_container" in api.names()) is inspected  # no inspect on success


def test_deadline_kills_then_reports_timed_out(backend: DockerBackend, api: StubAPI) -> None:
    api.failures["wait"] = [requests.exceptions.ReadTimeout("Read timed out.")]
    api.exit_code = 137
    result = backend.run(spec(timeout_s=2))
    assert result.status is SandboxStatus.TIMED_OUT
    names = api.names()
    assert names.index("kill") < names.index("remove_container")
    assert "stop" not in names


def test_transient_errors_are_retried_permanent_ones_not(
    backend: DockerBackend, api: StubAPI
) -> None:
    api.failures["remove_container"] = [api_error(500, "driver busy"), api_error(503)]
    backend.remove("c1")
    assert api.names().count("remove_container") == 3
    api.calls.clear()
    api.failures["inspect_container"] = [api_error(400, "bad request")]
    api.exit_code = 1
    with pytest.raises(APIError):
        backend.run(spec())
    assert api.names().count("inspect_container") == 1


def test_already_gone_is_fine(backend: DockerBackend, api: StubAPI) -> None:
    api.failures["remove_container"] = [api_error(404, "No such container")]
    api.failures["kill"] = [api_error(409, "is not running"), api_error(500, "No such container")]
    backend.remove("c1")  # 404: already removed
    backend.kill("c1")  # 409: already stopped
    backend.kill("c1")  # 500 "No such container": removed meanwhile
    assert api.names().count("remove_container") == 1
    assert api.names().count("kill") == 2


def test_dead_engine_is_one_clear_error(backend: DockerBackend, api: StubAPI) -> None:
    refused = requests.exceptions.ConnectionError("Connection refused")
    api.failures["create_container"] = [refused] * 10
    api.failures["inspect_container"] = [refused] * 10
    with pytest.raises(EngineUnavailableError, match="warden doctor --fix") as caught:
        backend.start(spec())
    assert "not answering (create (timeout 60 s)" in str(caught.value)
    assert not isinstance(caught.value, EngineSlowError)
    api.failures["containers"] = [refused] * 10
    with pytest.raises(EngineUnavailableError, match="DOCKER_HOST"):
        backend.list({wl.SESSION: None})
    assert api.names().count("containers") == 5  # RETRY_ATTEMPTS, then give up


def test_a_slow_engine_is_reported_as_slow_naming_the_timeout(
    backend: DockerBackend, api: StubAPI
) -> None:
    late = requests.exceptions.ReadTimeout("Read timed out. (read timeout=60)")
    api.failures["start"] = [late] * 10
    with pytest.raises(EngineSlowError, match=r"start \(timeout 60 s\)") as caught:
        backend.start(spec())
    assert "too slow" in str(caught.value) and "--max-concurrent" in str(caught.value)
    assert api.names().count("start") == 5
    assert api.names()[-1] == "remove_container"


def test_a_create_whose_answer_was_lost_is_found_by_name(
    backend: DockerBackend, api: StubAPI
) -> None:
    late = requests.exceptions.ReadTimeout("Read timed out.")
    api.failures["create_container"] = [late]
    created: list[dict[str, Any]] = []

    def inspect(name: str) -> dict[str, Any]:
        api._record("inspect_container", name)
        (_, _, kwargs) = next(c for c in api.calls if c[0] == "create_container")
        created.append(kwargs)
        return {"Id": "c-first", "Config": {"Labels": kwargs["labels"]}}

    api.inspect_container = inspect  # type: ignore[method-assign]
    assert backend.start(spec()) == "c-first"
    backend.remove("c-first")  # closes its output reader
    assert api.names().count("create_container") == 1
    assert created[0]["name"].startswith("warden-")
    assert ("inspect_container", (created[0]["name"],), {}) in api.calls


def test_missing_image(backend: DockerBackend, api: StubAPI) -> None:
    api.failures["create_container"] = [api_error(404, "No such image: img")]
    with pytest.raises(ImageNotFoundError, match="warden images build"):
        backend.start(spec())


def test_failed_start_attaches_logs_and_removes(backend: DockerBackend, api: StubAPI) -> None:
    api.failures["start"] = [api_error(400, "exec: run: not found")]
    with pytest.raises(ContainerStartError, match="failed to start") as caught:
        backend.start(spec())
    assert any("no such file" in note for note in caught.value.__notes__)
    assert api.names()[-1] == "remove_container"


def test_labels_checked(backend: DockerBackend) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        backend.start(spec(labels={"warden.task": "x"}))
    with pytest.raises(ConfigError, match="cleanup"):
        backend.start(spec(warden_labels={}))
    with pytest.raises(ValueError, match="namespace"):
        spec(warden_labels={"team": "x"})


def test_list_filters_by_label(backend: DockerBackend, api: StubAPI) -> None:
    found = backend.list({wl.SESSION: None, wl.TASK: "t1"})
    assert api.calls[-1][2] == {"all": True, "filters": {"label": [wl.SESSION, f"{wl.TASK}=t1"]}}
    assert asdict(found[0]) == {"id": "c9", "name": "n9", "status": "running",
                                     "labels": {"a": "b"}}  # fmt: skip


def test_removed_from_outside_while_running_is_removed(backend: DockerBackend, api: StubAPI) -> None:
    api.exit_code = 137
    api.failures["inspect_container"] = [api_error(404, "No such container")]
    assert backend.run(spec()).status is SandboxStatus.REMOVED


def test_removed_before_the_wait_is_removed(backend: DockerBackend, api: StubAPI) -> None:
    api.failures["wait"] = [api_error(404, "No such container")]
    assert backend.run(spec()).status is SandboxStatus.REMOVED


def test_mount_paths_are_checked(backend: DockerBackend, tmp_path: Path) -> None:
    from orchestrator.backend.contract import Mount

    for source, target in ((tmp_path, "relative"), (tmp_path / "a:b", "/x"), (tmp_path, "/x:y")):
        with pytest.raises(ConfigError, match="absolute"):
            backend.start(spec(mounts=[Mount(source=source, target=target)]))


def test_the_factory_builds_the_engine_backend_from_settings_and_guards_it(
    api: StubAPI, settings: Settings
) -> None:
    """Every command and run gets its backend from `make_backend`: the sandboxes it
    starts run as the settings' fallback uid, carry this state dir's owner labels, and
    are watched for their disk limits."""
    from orchestrator import owner
    from orchestrator.backend.disk import DiskGuardedBackend
    from orchestrator.backend.factory import make_backend

    client = StubClient()
    client.api = api
    backend = make_backend(client, replace(settings, fallback_uid=12345))
    assert isinstance(backend, DiskGuardedBackend)
    result = backend.run(spec())
    created = api.calls[0][2]
    assert created["user"] == "12345:12345"
    assert owner.current(settings.state_dir).labels().items() <= created["labels"].items()
    assert result.status is SandboxStatus.OK
