"""One behavioural suite every ContainerBackend must pass: results and statuses,
deadlines enforced by kill, kill from another thread, the output cap and its
announcement, label rules, idempotent kill/remove, list and cleanup by label.

It runs against FakeBackend and DockerBackend (the docker SDK on the real engine,
marked integration), with commands from the small vocabulary the fake understands.
"""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from orchestrator import labels as wl
from orchestrator.backend.contract import ContainerBackend, SandboxSpec, SandboxStatus
from orchestrator.backend.fake import FakeBackend
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, ImageNotFoundError
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    no_leftovers,
    sandbox_image,
)

if TYPE_CHECKING:
    from docker import DockerClient


@dataclass
class Harness:
    backend: ContainerBackend
    image: str
    workspace: Path
    session: str
    user_labels: dict[str, str]

    def spec(self, *command: str, **overrides: Any) -> SandboxSpec:
        values: dict[str, Any] = {
            "image": self.image,
            "command": list(command),
            "workspace": self.workspace,
            "labels": dict(self.user_labels),
            "warden_labels": wl.warden_labels(self.session, task="conformance"),
        }
        values.update(overrides)
        return SandboxSpec(**values)


@pytest.fixture(
    params=[
        "fake",
        pytest.param("docker", marks=pytest.mark.integration),
    ]
)
def harness(
    request: pytest.FixtureRequest,
    settings: Settings,
    workspace: Path,
    test_session: str,
    sandbox_image: str,
) -> Iterator[Harness]:
    if request.param == "fake":
        yield Harness(
            FakeBackend(images={sandbox_image}), sandbox_image, workspace, test_session, {}
        )
        return
    from orchestrator.backend.docker import DockerBackend

    client = request.getfixturevalue("docker_client")
    user_labels = request.getfixturevalue("no_leftovers")
    backend = DockerBackend(
        client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    yield Harness(backend, sandbox_image, workspace, test_session, user_labels)
    backend.cleanup({wl.SESSION: test_session})


def test_ok_and_output(harness: Harness) -> None:
    result = harness.backend.run(harness.spec("echo", "hello", "world"))
    assert result.status is SandboxStatus.OK and result.exit_code == 0
    assert result.stdout == "hello world\n" and result.stderr == ""
    assert result.truncated is False and result.duration_s > 0


@pytest.mark.parametrize(("command", "code"), [(["false"], 1), (["sh", "-c", "exit 7"], 7)])
def test_non_zero_exit_is_error(harness: Harness, command: list[str], code: int) -> None:
    result = harness.backend.run(harness.spec(*command))
    assert result.status is SandboxStatus.ERROR and result.exit_code == code


def test_deadline_kills_and_run_removes(harness: Harness) -> None:
    started = time.monotonic()
    result = harness.backend.run(harness.spec("sleep", "30", timeout_s=1))
    assert time.monotonic() - started < 15  # killed at 1 s, not run to 30 (room for load)
    assert result.status is SandboxStatus.TIMED_OUT
    assert harness.backend.list({wl.SESSION: harness.session}) == []


def test_kill_from_another_thread_reports_killed(harness: Harness) -> None:
    backend = harness.backend
    container_id = backend.start(harness.spec("sleep", "30"))
    try:
        threading.Timer(0.5, backend.kill, args=(container_id,)).start()
        result = backend.wait(container_id, 20)
    finally:
        backend.remove(container_id)
    assert result.status is SandboxStatus.KILLED


def test_output_cap_keeps_head_and_tail_and_announces(harness: Harness) -> None:
    result = harness.backend.run(
        harness.spec("head", "-c", "3000000", "/dev/zero", output_limit_bytes=1000)
    )
    assert result.truncated is True
    assert "[... warden: 3.0 MB of stdout omitted ...]" in result.stdout
    assert result.stdout.count("\0") == 1000  # 500 head + 500 tail bytes


def test_reserved_and_missing_labels_are_refused(harness: Harness) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        harness.backend.start(harness.spec("true", labels={"warden.session": "spoof"}))
    with pytest.raises(ConfigError, match=r"warden\.session"):
        harness.backend.start(harness.spec("true", warden_labels={wl.TASK: "t"}))
    assert harness.backend.list({wl.SESSION: harness.session}) == []


def test_missing_image(harness: Harness) -> None:
    with pytest.raises(ImageNotFoundError):
        harness.backend.start(harness.spec("true", image="warden-no-such-image:0"))


def test_kill_and_remove_are_idempotent(harness: Harness) -> None:
    backend = harness.backend
    container_id = backend.start(harness.spec("sleep", "30"))
    backend.kill(container_id)
    backend.kill(container_id)
    backend.remove(container_id)
    backend.remove(container_id)
    backend.kill(container_id)
    assert backend.list({wl.SESSION: harness.session}) == []


def test_list_and_cleanup_by_label(harness: Harness) -> None:
    backend = harness.backend
    ids = {backend.start(harness.spec("sleep", "30")) for _ in range(2)}
    try:
        found = backend.list({wl.SESSION: harness.session, wl.TASK: None})
        assert {info.id for info in found} == ids
        info = found[0]
        assert info.labels[wl.SESSION] == harness.session
        assert info.labels[wl.VERSION]
        assert backend.list({wl.SESSION: harness.session, wl.TASK: "other"}) == []
        assert backend.cleanup({wl.SESSION: harness.session}) == 2
        assert backend.list({wl.SESSION: harness.session}) == []
    finally:
        for container_id in ids:
            backend.remove(container_id)


@pytest.mark.integration
@pytest.mark.integration
def test_extra_mounts_honour_read_only(
    docker_client: DockerClient, settings: Settings, no_leftovers: dict[str, str],
    sandbox_image: str, workspace: Path, test_session: str, tmp_path: Path,
) -> None:  # fmt: skip
    from orchestrator.backend.contract import Mount
    from orchestrator.backend.docker import DockerBackend

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data").write_text("42\n")
    harness = Harness(
        DockerBackend(
            docker_client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
        ),
        sandbox_image, workspace,
        test_session,
        no_leftovers,
    )  # fmt: skip
    result = harness.backend.run(
        harness.spec(
            "sh", "-c", "cat /data/data; echo no > /data/data || echo refused",
            mounts=[Mount(source=shared, target="/data", read_only=True)],
        )
    )  # fmt: skip
    assert result.stdout == "42\nrefused\n"
    assert (shared / "data").read_text() == "42\n"
