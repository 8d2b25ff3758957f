"""A broker socket directory outlives a SIGKILLed orchestrator only until the next
sweep: recovery and `warden cleanup` remove the directories whose owner is provably
dead (a real process, really killed), never a live owner's, never one without an
owner marker or owned by a marker that is a link."""

from __future__ import annotations

import os
import resource
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
from pathlib import Path
from orchestrator.broker import SandboxIdentity, make_socket_dir
from orchestrator.lifecycle import socket_dirs
path = socket_dirs.mark(make_socket_dir(SandboxIdentity(os.getuid(), os.getgid()), Path(sys.argv[1])))
(path / "broker.sock").write_text("")
print(path, flush=True)
time.sleep(600)
"""


def _owner_process(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", MAKE_DIR, str(tmp_path)],
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


def test_out_of_descriptors_a_removal_takes_what_it_can_and_keeps_the_marker_of_the_rest(
    tmp_path: Path,
) -> None:
    """Listing a directory takes a descriptor: out of them, an emptied directory is
    still removed (by path), and one that is not keeps its marker for the next sweep."""
    emptied = socket_dirs.mark(tmp_path / "warden-sock-a")
    emptied.mkdir()
    full = tmp_path / "warden-sock-b"
    full.mkdir()
    socket_dirs.mark(full)
    (full / "broker.sock").write_text("")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # none left
    try:
        removed = (socket_dirs.remove(emptied), socket_dirs.remove(full))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert removed == (True, False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "warden-sock-b", "warden-sock-b.warden-owner"
    ]  # fmt: skip
    assert socket_dirs.remove(full) and list(tmp_path.iterdir()) == []


def test_a_directory_that_cannot_be_marked_is_removed(tmp_path: Path) -> None:
    """Unmarked, no sweep would ever remove it."""
    path = tmp_path / "warden-sock-c"
    path.mkdir()
    socket_dirs.marker_of(path).mkdir()  # the marker cannot be created
    with pytest.raises(FileExistsError):
        socket_dirs.mark(path)
    assert not path.exists()


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
    # This test's own socket root: the real one may hold other runs' dead directories.
    monkeypatch.setattr(socket_dirs, "ROOT_SOCKET_ROOT", tmp_path / "socket-root")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    with Store.open(tmp_path / "state" / "warden.db") as store:
        assert recover(store, FakeBackend()).socket_dirs == 1
    assert not path.exists()


def test_the_socket_root_is_this_users_own_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.errors import ConfigError

    root = tmp_path / "warden-root"
    monkeypatch.setattr(socket_dirs, "ROOT_SOCKET_ROOT", root)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    made = socket_dirs.socket_root()
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o711
    made.chmod(0o777)  # writable by others: someone could plant entries
    with pytest.raises(ConfigError, match="only it can write"):
        socket_dirs.socket_root()
    made.rmdir()
    made.symlink_to(tmp_path)  # a link another user planted
    with pytest.raises(ConfigError, match="another user may have made it"):
        socket_dirs.socket_root()


def test_no_other_user_can_plant_a_marker_in_the_socket_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root: it acts as another user")
    root = socket_dirs.socket_root()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(4242)
            os.setuid(4242)
            (root / ("warden-sock-guess" + socket_dirs.MARKER_SUFFIX)).write_text("{}")
        except PermissionError:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_other_users_markers_do_not_count_toward_the_sweep_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket_dirs, "MAX_SOCKET_DIRS_SCANNED", 5)
    foreign = [tmp_path / f"warden-sock-{i:02d}{socket_dirs.MARKER_SUFFIX}" for i in range(10)]
    for path in foreign:
        path.write_text("{}")
        os.chown(path, 4242, 4242)
    dead, dead_dir = _owner_process(tmp_path)
    dead.kill()
    dead.wait(timeout=10)
    assert socket_dirs.sweep(tmp_path) == [dead_dir]
    assert all(p.exists() for p in foreign)
