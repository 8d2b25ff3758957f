"""What sandboxes may not write: `.claude/`, `.git` and `.devcontainer` always, `--protect` and
`warden.protect` paths besides; every mount source is refused when it is a link,
has one on its way, or leaves the workspace."""

from __future__ import annotations

import errno
import fcntl
import gc
import json
import os
from pathlib import Path

import pytest

from orchestrator.backend.contract import Mount
from orchestrator.backend.mounts import check_confined
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, UnsafeMountError
from orchestrator.workspace import ProtectedPathError, WorkspaceGuard
from orchestrator.workspace import guard as guard_module
from orchestrator.workspace.guard import normalise_protected
from orchestrator.workspace.settings import protected_paths


def targets(guard: WorkspaceGuard) -> list[str]:
    return [m.target for m in guard.mounts()]


def test_claude_git_and_devcontainer_are_created_and_mounted_read_only(tmp_path: Path) -> None:
    guard = WorkspaceGuard.prepare(tmp_path)
    assert (tmp_path / ".claude").is_dir() and (tmp_path / ".git").is_dir()
    assert (tmp_path / ".devcontainer").is_dir(), "no sandbox can plant a dev container"
    mounts = guard.mounts()
    assert [m.target for m in mounts] == [
        "/workspace/.claude",
        "/workspace/.git",
        "/workspace/.devcontainer",
    ]
    assert all(m.read_only and m.confined_to == tmp_path for m in mounts)
    guard.release()
    assert (tmp_path / ".claude").is_dir(), ".claude stays: it is the workspace's own"
    assert not (tmp_path / ".git").exists(), "the .git placeholder goes with the run"
    assert not (tmp_path / ".devcontainer").exists(), "so does the .devcontainer one"


def test_an_existing_devcontainer_json_at_the_root_is_mounted_read_only(tmp_path: Path) -> None:
    (tmp_path / ".devcontainer.json").write_text('{"image": "x"}')
    guard = WorkspaceGuard.prepare(tmp_path)
    assert "/workspace/.devcontainer.json" in targets(guard)
    guard.release()
    assert (tmp_path / ".devcontainer.json").read_text() == '{"image": "x"}'


def test_an_existing_git_is_never_removed_and_a_filled_placeholder_stays(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    WorkspaceGuard.prepare(tmp_path).release()
    assert (tmp_path / ".git" / "HEAD").exists()
    other = tmp_path / "other"
    other.mkdir()
    guard = WorkspaceGuard.prepare(other)
    (other / ".git" / "x").write_text("")
    guard.release()
    assert (other / ".git" / "x").exists()


def test_git_as_a_file_is_mounted_as_it_is(tmp_path: Path) -> None:
    (tmp_path / ".git").write_text("gitdir: /elsewhere\n")
    assert "/workspace/.git" in targets(WorkspaceGuard.prepare(tmp_path))


@pytest.mark.parametrize("name", [".git", ".claude"])
def test_a_link_is_refused_with_the_path_and_the_fix(tmp_path: Path, name: str) -> None:
    outside = tmp_path / "host"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / name).symlink_to(outside)
    with pytest.raises(UnsafeMountError, match=rf"{name} is a symbolic link .*replace it"):
        WorkspaceGuard.prepare(ws)


def test_a_link_anywhere_on_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real" / "ci").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "cfg").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafeMountError, match="cfg is a symbolic link"):
        check_confined(tmp_path / "ws", tmp_path / "ws" / "cfg" / "ci")


def test_outside_and_dotdot_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeMountError, match="outside"):
        check_confined(tmp_path / "ws", tmp_path / "other")
    with pytest.raises(UnsafeMountError, match=r"'\.\.'"):
        check_confined(tmp_path, tmp_path / "a" / ".." / "b")


def test_a_mount_that_turned_into_a_link_after_prepare_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ci").mkdir()
    guard = WorkspaceGuard.prepare(tmp_path, protect=["ci"])
    os.rmdir(tmp_path / "ci")
    os.symlink("/etc", tmp_path / "ci")
    with pytest.raises(UnsafeMountError, match="ci is a symbolic link"):
        guard.mounts()


def test_protect_paths_are_normalised_and_confined(tmp_path: Path) -> None:
    assert normalise_protected("./a/b/", tmp_path) == "a/b"
    assert normalise_protected("/workspace/a", tmp_path) == "a"
    assert normalise_protected(str(tmp_path / "a"), tmp_path) == "a"
    for bad in ("", ".", "..", "../x", "/etc", "/workspace"):
        with pytest.raises(ProtectedPathError):
            normalise_protected(bad, tmp_path)


def test_a_missing_protect_flag_path_is_an_error_but_a_settings_one_is_skipped(
    tmp_path: Path,
) -> None:
    with pytest.raises(ProtectedPathError, match="create it first"):
        WorkspaceGuard.prepare(tmp_path, protect=["scripts"])
    guard = WorkspaceGuard.prepare(tmp_path, optional=["scripts"])
    assert "/workspace/scripts" not in targets(guard)
    (tmp_path / "scripts").mkdir()
    guard = WorkspaceGuard.prepare(tmp_path, optional=["scripts"])
    assert "/workspace/scripts" in targets(guard)


def test_the_settings_key_adds_up_across_files(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "config")
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    settings.config_dir.mkdir()
    (settings.config_dir / "settings.json").write_text(json.dumps({"warden": {"protect": ["a"]}}))
    (ws / ".claude" / "settings.json").write_text(json.dumps({"warden": {"protect": ["b"]}}))
    assert sorted(protected_paths(settings, ws)) == ["a", "b"]
    (ws / ".claude" / "settings.json").write_text(json.dumps({"warden": {"protect": "b"}}))
    with pytest.raises(ConfigError, match="must be a list"):
        protected_paths(settings, ws)


@pytest.mark.parametrize("flip", ["to_link", "removed"])
def test_a_parent_flipped_while_being_checked_refuses_the_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flip: str
) -> None:
    """A sandbox flipping a protected path's parent between a directory and a link
    (or removing it) between warden's stat and open refuses that mount with an
    UnsafeMountError, never an OSError that ends the run as an internal error."""
    ws = tmp_path / "ws"
    (ws / "cfg" / "ci").mkdir(parents=True)
    (tmp_path / "elsewhere" / "ci").mkdir(parents=True)
    real_open = os.open

    def racing_open(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == "cfg" and kwargs.get("dir_fd") is not None:
            (ws / "cfg").rename(ws / "cfg.d")
            if flip == "to_link":
                (ws / "cfg").symlink_to(tmp_path / "elsewhere")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("orchestrator.backend.mounts.os.open", racing_open)
    with pytest.raises(UnsafeMountError, match="cfg"):
        check_confined(ws, ws / "cfg" / "ci")


def test_a_run_keeps_its_git_placeholder_when_another_run_on_the_workspace_ends(
    tmp_path: Path,
) -> None:
    """Two runs on a workspace without .git: the first made the placeholder, the
    second found it. The first ends while the second is starting a sandbox whose
    .git it has checked: the placeholder stays (the same directory) until the last
    run on the workspace ends, whichever of the two that is."""
    for last in ("second", "first"):
        first = WorkspaceGuard.prepare(tmp_path)
        second = WorkspaceGuard.prepare(tmp_path)
        (checked,) = [m.source for m in second.mounts() if m.target == "/workspace/.git"]
        before = os.stat(checked)
        ending, staying = (first, second) if last == "second" else (second, first)
        ending.release()
        after = os.stat(tmp_path / ".git")
        assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino), last
        staying.release()
        assert not (tmp_path / ".git").exists(), last


def test_two_one_off_commands_at_once_leave_no_trace_whichever_ends_last(
    tmp_path: Path,
) -> None:
    for last in (0, 1):
        guards = [WorkspaceGuard.prepare(tmp_path, leave_no_trace=True) for _ in range(2)]
        guards[1 - last].release()
        assert (tmp_path / ".git").is_dir() and (tmp_path / ".claude").is_dir()
        guards[last].release()
        assert sorted(os.listdir(tmp_path)) == [], last


def test_claude_and_git_removed_by_hand_are_made_again_for_the_next_sandbox(
    tmp_path: Path,
) -> None:
    guard = WorkspaceGuard.prepare(tmp_path)
    (tmp_path / ".git").rmdir()
    (tmp_path / ".claude").rmdir()
    mounts = {m.target: m for m in guard.mounts()}
    assert mounts["/workspace/.git"].read_only and mounts["/workspace/.claude"].read_only
    assert (tmp_path / ".git").is_dir() and (tmp_path / ".claude").is_dir()
    guard.release()
    assert not (tmp_path / ".git").exists()
    assert (tmp_path / ".claude").is_dir()  # a run's .claude stays, as it was made first


def test_a_run_that_cannot_lock_the_workspace_starts_and_leaves_its_placeholder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something that is not a warden run (a sandbox can open /workspace too) holds
    the workspace's lock exclusively: the run still starts, after a bounded wait,
    and leaves its (empty) placeholder rather than remove it under another run."""
    monkeypatch.setattr(guard_module, "HOLD_WAIT_S", 0.05)
    squatter = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(squatter, fcntl.LOCK_EX)
        guard = WorkspaceGuard.prepare(tmp_path)
        assert "is locked by something other than a warden run" in caplog.text
        assert "/workspace/.git" in targets(guard)
        guard.release()
    finally:
        os.close(squatter)
    assert (tmp_path / ".git").is_dir()
    WorkspaceGuard.prepare(tmp_path).release()  # alone now, and it is no placeholder
    assert (tmp_path / ".git").is_dir()


def test_on_a_filesystem_without_locks_a_run_cleans_up_after_itself_as_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr("orchestrator.workspace.guard.fcntl.flock", no_locks)
    monkeypatch.setattr(guard_module, "HOLD_WAIT_S", 3600.0)  # a wait here would hang
    guard = WorkspaceGuard.prepare(tmp_path)
    assert "/workspace/.git" in targets(guard) and "is locked by" not in caplog.text
    guard.release()
    assert not (tmp_path / ".git").exists()


def test_a_guard_dropped_without_release_lets_the_workspace_go(tmp_path: Path) -> None:
    WorkspaceGuard.prepare(tmp_path)
    gc.collect()
    probe = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
    finally:
        os.close(probe)


@pytest.mark.parametrize("last", ["first", "second"])
def test_a_run_starting_while_another_is_between_its_lock_and_its_placeholder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last: str
) -> None:
    """The second run takes the workspace's lock after the first has taken it but
    before the first made `.git`: the second makes it and the first finds it there.
    Whichever ends last removes it (it stayed in the workspace for good when the
    one that made it ended first: the other had neither made nor adopted it)."""
    real_mounts = WorkspaceGuard.mounts
    started: list[WorkspaceGuard] = []

    def the_second_starts_now(guard: WorkspaceGuard) -> list[Mount]:
        monkeypatch.setattr(WorkspaceGuard, "mounts", real_mounts)  # once
        started.append(WorkspaceGuard.prepare(tmp_path))
        return real_mounts(guard)

    monkeypatch.setattr(WorkspaceGuard, "mounts", the_second_starts_now)
    first = WorkspaceGuard.prepare(tmp_path)
    (second,) = started
    assert (tmp_path / ".git").is_dir()
    ending, staying = (first, second) if last == "second" else (second, first)
    ending.release()
    assert (tmp_path / ".git").is_dir(), "the other run is live: its .git stays"
    staying.release()
    assert not (tmp_path / ".git").exists(), last
