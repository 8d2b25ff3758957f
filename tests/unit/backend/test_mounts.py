"""Pinned mount sources: what warden checked is what gets mounted. A source swapped
for a link after the pin still shows the checked directory (or file) at the pinned
path, a link found at pin time is refused, and leaving the block detaches and
removes every pin."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.backend.mounts import PinnedSources
from orchestrator.errors import UnsafeMountError

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


def mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == str(path) for line in mounts)


@needs_root
def test_a_pinned_source_keeps_what_was_checked_after_a_swap(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("checked\n")
    (workspace / "notes").write_text("a file\n")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "config").write_text("HOST SECRET\n")
    with PinnedSources(tmp_path / "pins") as pins:
        pinned = pins.pin(workspace, workspace / ".git")
        pinned_file = pins.pin(workspace, workspace / "notes")
        os.rename(workspace / ".git", workspace / "moved")
        os.symlink(secret, workspace / ".git")  # planted after the check
        assert pinned != workspace / ".git" and mounted(pinned)
        assert (pinned / "config").read_text() == "checked\n"
        assert pinned_file.read_text() == "a file\n"
    assert not mounted(pinned) and not pinned.exists() and not pinned_file.exists()
    with PinnedSources(tmp_path / "pins") as pins, pytest.raises(UnsafeMountError, match="link"):
        pins.pin(workspace, workspace / ".git")


@needs_root
def test_a_pin_root_someone_else_could_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ws" / "d").mkdir(parents=True)
    shared = tmp_path / "pins"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with PinnedSources(shared) as pins, pytest.raises(UnsafeMountError, match="only root"):
        pins.pin(tmp_path / "ws", tmp_path / "ws" / "d")


@needs_root
def test_a_dead_owners_pins_are_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    from orchestrator.backend.mounts import sweep_pins

    (tmp_path / "ws" / "d").mkdir(parents=True)
    root = tmp_path / "pins"
    with PinnedSources(root) as pins:  # detached on the way out, whatever fails
        mine = pins.pin(tmp_path / "ws", tmp_path / "ws" / "d")  # this process: alive
        gone = root / f"pin-{os.getpid() + 100000}-x"  # no such process (pid_max is lower)
        gone.mkdir()
        assert sweep_pins(root) == 1
        assert not gone.exists() and mounted(mine)
    assert not mounted(mine)


@needs_root
def test_a_pin_is_judged_by_its_makers_start_time_and_pid_namespace(tmp_path: Path) -> None:
    """Wardens share /run/warden-pins. A pin whose pid now names another process (the
    maker died, the pid was reused) is swept; a pin made in another pid namespace is
    kept whatever its pid means here (its maker may be alive: it was swept, and the
    container it was pinned for failed to start)."""
    from orchestrator import owner
    from orchestrator.backend.mounts import sweep_pins

    (tmp_path / "ws" / "d").mkdir(parents=True)
    root = tmp_path / "pins"
    with PinnedSources(root) as pins:  # detached on the way out, whatever fails
        mine = pins.pin(tmp_path / "ws", tmp_path / "ws" / "d")
        me, start, here = os.getpid(), owner.process_start(os.getpid()), owner.pid_namespace()
        assert start is not None
        reused = root / f"pin-{me}-{start + 1}-{here}-x"  # my pid, another process's start
        elsewhere = root / f"pin-{me + 100000}-{start}-{here + 1}-x"  # no such pid here
        for pin in (reused, elsewhere):
            pin.mkdir()
        assert sweep_pins(root) == 1
        assert not reused.exists() and elsewhere.exists() and mounted(mine)
    assert not mounted(mine)
