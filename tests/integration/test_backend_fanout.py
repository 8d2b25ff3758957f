"""One docker SDK client carries a fan-out: 60 sandboxes created, started, waited for
and removed at once from 60 threads through one DockerBackend all succeed with their
own output, and none is left behind (the SDK's connection pools are sized to the
calls in flight, see `backend.connect`)."""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator import labels as wl
from orchestrator.backend.connect import connect, pool_size
from orchestrator.backend.contract import SandboxResult, SandboxSpec, SandboxStatus
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    no_leftovers,
    sandbox_image,
)

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = pytest.mark.integration

FAN_OUT = 60


@pytest.fixture
def fan_out_client() -> Iterator[DockerClient]:
    client = connect(max_pool_size=pool_size(FAN_OUT))
    yield client
    client.close()


def test_sixty_lifecycles_at_once_on_one_client(
    fan_out_client: DockerClient, settings: Settings, workspace: Path, test_session: str,
    sandbox_image: str, no_leftovers: dict[str, str],
) -> None:  # fmt: skip
    api = fan_out_client.api
    assert api.get_adapter(api.base_url).max_pool_size >= FAN_OUT  # a pool is never full
    backend = DockerBackend(
        fan_out_client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    go = threading.Barrier(FAN_OUT)
    results: dict[int, SandboxResult] = {}
    errors: list[BaseException] = []

    def lifecycle(i: int) -> None:
        spec = SandboxSpec(
            image=sandbox_image,
            command=["echo", str(i)],
            workspace=workspace,
            labels=no_leftovers,
            warden_labels=wl.warden_labels(test_session, task=f"fan-{i}"),
            timeout_s=120,
        )
        try:
            go.wait()
            results[i] = backend.run(spec)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=lifecycle, args=(i,)) for i in range(FAN_OUT)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        backend.cleanup({wl.SESSION: test_session})
    assert errors == []
    assert sorted(results) == list(range(FAN_OUT))
    for i, result in results.items():
        assert (result.status, result.stdout) == (SandboxStatus.OK, f"{i}\n")
    assert backend.list({wl.SESSION: test_session}) == []
