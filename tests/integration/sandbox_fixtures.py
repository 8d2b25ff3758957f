"""Fixtures shared by the backend and `warden exec` integration tests.

Import them into a test module by name. Every container those tests create carries
the label `warden-test.run=<RUN_ID>`; `no_leftovers` fails the module if one remains.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from orchestrator.backend.connect import connect

if TYPE_CHECKING:
    from docker import DockerClient

TEST_LABEL = "warden-test.run"
RUN_ID = uuid.uuid4().hex[:12]
"""One value per pytest process: tags every container these tests create."""


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The image sandboxes run: the restricted bash image that `warden exec` uses by
    default (env WARDEN_TEST_IMAGE overrides it)."""
    override = os.environ.get("WARDEN_TEST_IMAGE")
    if override:
        return override
    from orchestrator.errors import ImageNotFoundError
    from orchestrator.images import resolve_image

    client = connect()
    try:
        return resolve_image(client, "bash")
    except ImageNotFoundError as exc:
        pytest.fail(str(exc))
    finally:
        client.close()


@pytest.fixture(scope="session")
def docker_client(sandbox_image: str) -> Iterator[DockerClient]:
    """A client for the real engine. Fails (never skips) when the engine or image is missing."""
    client = connect()  # raises EngineUnavailableError naming the fix
    try:
        client.images.get(sandbox_image)
    except Exception as exc:  # any failure here means the image is unusable
        pytest.fail(f"test image {sandbox_image!r} is missing ({exc}); run `warden images build`")
    yield client
    client.close()


@pytest.fixture(scope="module")
def no_leftovers(docker_client: DockerClient) -> Iterator[dict[str, str]]:
    """User labels for test containers; after the module, none of them may remain."""
    labels = {TEST_LABEL: RUN_ID}
    yield labels
    rows = docker_client.api.containers(all=True, filters={"label": f"{TEST_LABEL}={RUN_ID}"})
    for row in rows:
        docker_client.api.remove_container(row["Id"], force=True)
    assert not rows, f"containers left behind: {[r['Names'] for r in rows]}"


def label_args(labels: dict[str, str]) -> list[str]:
    """`--label K=V` flags for the CLI."""
    return [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
