"""Locks in that a missing engine is told apart from a stopped one, from a socket this
user may not use, and from a remote engine, each with the fix that helps in that case
(the `docker` group and rootless Docker for a refused socket)."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backend import connect as engine
from orchestrator.errors import EngineUnavailableError

NOBODY = 65534

# The docker SDK leaves the socket of a failed version negotiation unclosed (docker 7.1:
# `DockerClient.from_env(version="auto")` raising); the process it happens in is about
# to print the error and exit, so that leak is not what these tests are about.
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(autouse=True)
def _collect_the_sdk_leak() -> Iterator[None]:
    """Collect the leaked socket here, so its warning does not land in a later test."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _problem(monkeypatch: pytest.MonkeyPatch, host: str) -> str:
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(EngineUnavailableError) as caught:
        engine.connect(timeout_s=2)
    return str(caught.value)


@pytest.fixture
def stale_socket(tmp_path: Path) -> Iterator[Path]:
    """A socket file nobody listens on: what a stopped engine leaves."""
    path = tmp_path / "docker.sock"
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.bind(str(path))
    holder.close()
    yield path


def test_no_socket_and_no_dockerd_says_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engine, "dockerd_installed", lambda: False)
    message = _problem(monkeypatch, f"unix://{tmp_path}/missing.sock")
    assert "no Docker engine is installed" in message
    assert "warden doctor --fix" in message and "rootless" in message


def test_no_socket_with_dockerd_installed_says_start_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engine, "dockerd_installed", lambda: True)
    message = _problem(monkeypatch, f"unix://{tmp_path}/missing.sock")
    assert "installed but not running" in message
    assert "systemctl start docker" in message


def test_a_socket_nobody_listens_on_is_a_stopped_engine(
    monkeypatch: pytest.MonkeyPatch, stale_socket: Path
) -> None:
    monkeypatch.setattr(engine, "dockerd_installed", lambda: True)
    message = _problem(monkeypatch, f"unix://{stale_socket}")
    assert "not running" in message and str(stale_socket) in message


def test_a_remote_engine_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    message = _problem(monkeypatch, "tcp://127.0.0.1:2375")
    assert "remote engine" in message and "unset DOCKER_HOST" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a socket another uid cannot use")
def test_a_socket_this_user_may_not_use_names_the_docker_group(tmp_path: Path) -> None:
    """A real permission refusal: a listening socket only root may use, connected to by
    a process running as nobody (as a user outside the `docker` group meets it)."""
    path = tmp_path / "docker.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    os.chmod(path, 0o660)
    tmp_path.chmod(0o755)
    # Everything is imported as root, then the process becomes nobody (the
    # interpreter's own files need not be readable to nobody).
    code = (
        "import os, socket, docker\n"
        "from orchestrator.backend.connect import connect\n"
        "from orchestrator.errors import EngineUnavailableError\n"
        f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"
        "try:\n    connect(timeout_s=2)\n"
        "except EngineUnavailableError as exc:\n    print(exc)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "DOCKER_HOST": f"unix://{path}", "HOME": str(tmp_path)},
            capture_output=True, text=True, timeout=60, check=True,
            cwd=Path(__file__).resolve().parents[3],
        )  # fmt: skip
    finally:
        listener.close()
    assert "permission denied" in done.stdout, done.stdout + done.stderr
    assert "usermod -aG docker" in done.stdout and "rootless Docker" in done.stdout
    assert "not running" not in done.stdout
