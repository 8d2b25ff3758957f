"""Locks in how `warden exec` picks its image: the run's precedence without the
agent file (`--image` > the workspace's dev container > bash), the dev container
used by default only in a trusted workspace, and nothing read or imported when
there is none. No engine: a dev container that names an image needs no call."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.runtime.run_images import command_image

NO_ENGINE = None  # a dev container naming an image makes no engine call


def pick(settings: Settings, workspace: Path, image: str | None = None,
         devcontainer: bool | None = None) -> str:  # fmt: skip
    return command_image(
        NO_ENGINE,  # type: ignore[arg-type]  # never called in these cases
        settings,
        workspace,
        image=image,
        devcontainer=devcontainer,
        default="bash",
    )


@pytest.fixture
def with_dev_container(workspace: Path) -> Path:
    (workspace / ".devcontainer.json").write_text(json.dumps({"image": "node-tools:1"}))
    return workspace


def test_without_a_dev_container_the_default_unless_image(settings: Settings, workspace: Path) -> None:
    assert pick(settings, workspace) == "bash"
    assert pick(settings, workspace, "cc:1") == "cc:1"
    assert pick(settings, workspace, devcontainer=True) == "bash"


def test_a_trusted_workspaces_dev_container_comes_after_image(
    settings: Settings, with_dev_container: Path
) -> None:
    trusted = replace(settings, trust_workspace=True)
    assert pick(trusted, with_dev_container) == "node-tools:1"
    assert pick(trusted, with_dev_container, "cc:1") == "cc:1"
    assert pick(trusted, with_dev_container, devcontainer=False) == "bash"
    off = replace(trusted, devcontainer=False)  # WARDEN_DEVCONTAINER=0
    assert pick(off, with_dev_container) == "bash"
    assert pick(off, with_dev_container, devcontainer=True) == "node-tools:1"


def test_an_untrusted_workspaces_dev_container_only_when_asked(
    settings: Settings, with_dev_container: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert pick(settings, with_dev_container) == "bash"
    assert "the workspace is not trusted" in caplog.text
    assert pick(settings, with_dev_container, devcontainer=True) == "node-tools:1"
