"""A broker socket directory outlives a SIGKILLed orchestrator only until the next
sweep: recovery and `warden cleanup` remove the directories whose owner is provably
dead (a real process, really killed), never a live owner's, never one without an
owner marker or owned by a marker that is a link."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from orchestrator.lifecycle import socket_dirs
from tests.conftest import warden_env

MAKE_DIR = """
import os, sys, time
from orchestrator.broker import SandboxIdentity, make_socket_dir
from orchestrator.lifecycle import socket_dirs
path = socket_dirs.mark(make_socket_dir(SandboxIdentity(os.getuid(), os.getgid())))
(path / "broker.sock").write_text("")
print(path, flush=True)
time.sleep(600)
"""


def _owner_process(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", MAKE_DIR],
        env=warden_env(TMPDIR=str(tmp_path)),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    proc.stdout.close()
    assert path.parent == tmp_path and path.is_dir(), path
    return proc, path


def test_a_dead_owners_socket_dir_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead, dead_dir = _owner_process(tmp_path)
    live, live_dir = _owner_process(tmp_path)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=10)
        assert dead_dir.is_dir()  # a killed process removes nothing
        unmarked = tmp_path / "warden-sock-older"
        unmarked.mkdir()
        assert socket_dirs.sweep(tmp_path) == [dead_dir]
        assert not dead_dir.exists() and not socket_dirs.marker_of(dead_dir).exists()
        assert live_dir.is_dir() and socket_dirs.marker_of(live_dir).is_file()
        assert unmarked.is_dir()  # no marker: nothing proves its owner is gone
    finally:
        live.kill()
        live.wait(timeout=10)
    assert socket_dirs.sweep(tmp_path) == [live_dir]


def test_a_planted_marker_link_is_not_followed(tmp_path: Path) -> None:
    proc, path = _owner_process(tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    marker = socket_dirs.marker_of(path)
    real = tmp_path / "elsewhere.json"
    os.rename(marker, real)
    marker.symlink_to(real)
    assert socket_dirs.sweep(tmp_path) == []
    assert path.is_dir()


def test_a_normal_removal_takes_the_marker_along(tmp_path: Path) -> None:
    proc, path = _owner_process(tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    socket_dirs.remove(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_recovery_at_the_start_of_a_run_sweeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.backend.fake import FakeBackend
    from orchestrator.lifecycle.recovery import recover
    from orchestrator.store import Store

    proc, path = _owner_process(tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what gettempdir() answers
    with Store.open(tmp_path / "state" / "warden.db") as store:
        assert recover(store, FakeBackend()).socket_dirs == 1
    assert not path.exists()
