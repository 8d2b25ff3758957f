"""Shared fixtures. Integration tests use the real engine; they fail (never skip)
when it is missing, with the command that fixes it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config import Settings

UNPRIVILEGED = 1000


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "config")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace owned by an unprivileged user, as a real user's would be."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, UNPRIVILEGED, UNPRIVILEGED)
    return ws


@pytest.fixture
def test_session() -> Iterator[str]:
    """A warden.session label value unique to one test."""
    yield f"test-{uuid.uuid4().hex[:12]}"


REPO_ROOT = Path(__file__).resolve().parent.parent


def warden_argv(*args: str) -> list[str]:
    """argv that runs this tree's `warden` CLI (not whatever is installed)."""
    import sys

    return [sys.executable, "-m", "orchestrator", *args]


def warden_env(**extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess that imports this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env
