"""A link a sandbox plants in the workspace after warden checked a mount source, and
before the engine mounts it, is not followed: the engine mounts exactly what warden
checked (pinned by its descriptor at a root-only path), never the host directory the
link points to."""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from orchestrator import labels as wl
from orchestrator.backend.contract import Mount, SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.backend.mounts import PIN_ROOT
from orchestrator.config import Settings
from orchestrator.errors import ContainerStartError
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    no_leftovers,
    sandbox_image,
)

pytestmark = pytest.mark.integration

LOOK = (
    "cat /workspace/.git/config 2>&1; echo; "
    "grep -rs 'HOST SECRET' /workspace /tmp /run /mnt 2>/dev/null | head -3; echo looked"
)


def test_a_link_planted_between_the_check_and_the_mount_is_not_followed(
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    sandbox_image: str,
    docker_client: DockerClient,
    no_leftovers: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = tmp_path / "host-secret"  # a host directory the sandbox must never see
    secret.mkdir()
    (secret / "config").write_text("HOST SECRET\n")
    git = workspace / ".git"
    git.mkdir()
    (git / "config").write_text("[core]\n\tbare = false\n")
    backend = DockerBackend(
        docker_client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    session = "test-mount-race"
    spec = SandboxSpec(
        image=sandbox_image,
        command=["sh", "-c", LOOK],
        workspace=workspace,
        # As the workspace guard mounts .git: read-only, confined to the workspace.
        mounts=[
            Mount(
                source=git,
                target="/workspace/.git",
                read_only=True,
                confined_to=workspace.resolve(),
            )
        ],
        labels=no_leftovers,
        warden_labels=wl.warden_labels(session, task="race"),
        timeout_s=60,
    )
    create = backend._api.create_container
    planted: list[bool] = []

    def plant_then_create(*args: Any, **kwargs: Any) -> Any:
        # What a sandbox does in the window: warden has checked .git; swap it for a
        # link to the host directory before the engine resolves the source.
        os.rename(git, workspace / ".git-moved")
        os.symlink(secret, git)
        planted.append(True)
        return create(*args, **kwargs)

    monkeypatch.setattr(backend._api, "create_container", plant_then_create)
    try:
        result = backend.run(spec)
        shown = result.stdout + result.stderr
    except ContainerStartError as exc:  # refusing to start is safe too
        shown = str(exc)
    finally:
        backend.cleanup({wl.SESSION: session})
    assert planted == [True]
    assert "HOST SECRET" not in shown, shown
    assert "looked" in shown or "start" in shown.lower(), shown
    # Nothing pinned is left mounted on the host.
    assert not list(PIN_ROOT.iterdir()) if PIN_ROOT.exists() else True
    with open("/proc/self/mounts") as mounts:
        assert str(PIN_ROOT) not in mounts.read()
