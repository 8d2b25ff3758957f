"""`warden cleanup` removes the broker socket directories a SIGKILLed warden left
in the temp dir (and says how many), and keeps those of a live one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.conftest import run_warden
from tests.unit.lifecycle.test_socket_dirs import _owner_process

pytestmark = pytest.mark.integration


def test_cleanup_removes_a_killed_owners_socket_dirs_only(
    settings: Settings, tmp_path: Path, test_session: str
) -> None:
    sockets = tmp_path / "tmp"
    sockets.mkdir()
    dead, dead_dir = _owner_process(sockets)
    live, live_dir = _owner_process(sockets)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=10)
        done = run_warden(
            settings, "cleanup", "--session", test_session, "--json", TMPDIR=str(sockets)
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["socket_dirs_removed"] == 1
        assert not dead_dir.exists() and live_dir.is_dir()
    finally:
        live.kill()
        live.wait(timeout=10)
