"""A file the subagent replaced by a directory, or a directory (an empty one too)
it replaced by a file, is a change like any other when the workspace still holds
what the copy started from there; when the workspace changed that path (or put something new
under the directory) it is still a conflict, and nothing is written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ChangeSet, ContentStore
from orchestrator.apply.compute import compute_change_set
from orchestrator.apply.merge import ApplyResult, apply_change_set
from orchestrator.apply.render import summary_line
from orchestrator.apply.workcopy import WorkingCopy, content_store, make_working_copy


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src" / "empty").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("one\n")
    (ws / "src" / "deep").mkdir()
    (ws / "src" / "deep" / "lib.py").write_text("lib\n")
    (ws / "notes").write_text("notes\n")
    return ws


def copy_of(ws: Path, tmp_path: Path) -> tuple[WorkingCopy, ContentStore]:
    state = tmp_path / "state"
    copy = make_working_copy(ws, state, run_id="r", task_id="t1", agent="coder", session="s")
    return copy, content_store(state)


def apply(copy: WorkingCopy, store: ContentStore, ws: Path) -> tuple[ChangeSet, ApplyResult]:
    change_set, _ = compute_change_set(copy, store)
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return change_set, apply_change_set(change_set, fd, store)
    finally:
        os.close(fd)


def test_a_file_replaced_by_a_directory_is_applied(ws: Path, tmp_path: Path) -> None:
    copy, store = copy_of(ws, tmp_path)
    (copy.work / "notes").unlink()
    (copy.work / "notes").mkdir()
    (copy.work / "notes" / "today.md").write_text("today\n")
    change_set, result = apply(copy, store, ws)
    assert {c.path: c.kind for c in change_set.changes} == {
        "notes": "removed",
        "notes/today.md": "added",
    }
    assert result.conflicts == () and result.applied == ("notes", "notes/today.md")
    assert (ws / "notes" / "today.md").read_text() == "today\n"


def test_a_directory_replaced_by_a_file_is_applied(ws: Path, tmp_path: Path) -> None:
    copy, store = copy_of(ws, tmp_path)
    shutil.rmtree(copy.work / "src")
    (copy.work / "src").write_text("now a file\n")
    change_set, result = apply(copy, store, ws)
    assert {c.path: c.kind for c in change_set.changes} == {
        "src": "added",
        "src/app.py": "removed",
        "src/deep/lib.py": "removed",
        "src/empty": "removed",  # the empty directory under it, as the copy started
    }
    assert result.conflicts == (), result.conflicts
    assert (ws / "src").is_file() and (ws / "src").read_text() == "now a file\n"


def test_a_directory_replaced_by_a_link_is_applied(ws: Path, tmp_path: Path) -> None:
    copy, store = copy_of(ws, tmp_path)
    shutil.rmtree(copy.work / "src")
    (copy.work / "src").symlink_to("notes")
    _, result = apply(copy, store, ws)
    assert result.conflicts == ()
    assert os.readlink(ws / "src") == "notes"


def test_the_workspace_changed_the_replaced_file_conflicts(ws: Path, tmp_path: Path) -> None:
    copy, store = copy_of(ws, tmp_path)
    (copy.work / "notes").unlink()
    (copy.work / "notes").mkdir()
    (copy.work / "notes" / "today.md").write_text("today\n")
    (ws / "notes").write_text("the person's edit\n")
    _, result = apply(copy, store, ws)
    assert result.applied == () and result.conflicts[0].path == "notes"
    assert (ws / "notes").read_text() == "the person's edit\n"


@pytest.mark.parametrize("edit", ["added", "changed"])
def test_the_workspace_changed_the_replaced_directory_conflicts(
    ws: Path, tmp_path: Path, edit: str
) -> None:
    copy, store = copy_of(ws, tmp_path)
    shutil.rmtree(copy.work / "src")
    (copy.work / "src").write_text("now a file\n")
    if edit == "added":
        (ws / "src" / "deep" / "mine.py").write_text("the person's\n")
    else:
        (ws / "src" / "app.py").write_text("the person's edit\n")
    _, result = apply(copy, store, ws)
    assert result.applied == () and result.conflicts
    assert (ws / "src" / "app.py").is_file() and (ws / "src" / "deep" / "lib.py").is_file()
    if edit == "added":
        assert "src/deep/mine.py" in result.conflicts[0].reason
        assert (ws / "src" / "deep" / "mine.py").read_text() == "the person's\n"


def test_an_empty_directory_replaced_by_a_file_is_applied(ws: Path, tmp_path: Path) -> None:
    copy, store = copy_of(ws, tmp_path)
    (copy.work / "src" / "empty").rmdir()
    (copy.work / "src" / "empty").write_text("now a file\n")
    change_set, result = apply(copy, store, ws)
    [change] = change_set.changes
    assert (change.path, change.kind, change.old_type, change.new_type) == (
        "src/empty",
        "added",
        "dir",
        "file",
    )
    assert summary_line(change).endswith("(in place of an empty directory)")
    assert result.conflicts == () and result.applied == ("src/empty",)
    assert (ws / "src" / "empty").read_text() == "now a file\n"


def test_an_empty_directory_replaced_by_a_link_is_applied(ws: Path, tmp_path: Path) -> None:
    copy, store = copy_of(ws, tmp_path)
    (copy.work / "src" / "empty").rmdir()
    (copy.work / "src" / "empty").symlink_to("app.py")
    _, result = apply(copy, store, ws)
    assert result.conflicts == ()
    assert os.readlink(ws / "src" / "empty") == "app.py"


def test_a_directory_holding_only_an_empty_directory_replaced_by_a_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    copy, store = copy_of(ws, tmp_path)
    shutil.rmtree(copy.work / "a")
    (copy.work / "a").write_text("a file\n")
    change_set, result = apply(copy, store, ws)
    assert {c.path: (c.kind, c.old_type) for c in change_set.changes} == {
        "a": ("added", None),
        "a/b": ("removed", "dir"),
    }
    assert result.conflicts == (), result.conflicts
    assert (ws / "a").read_text() == "a file\n"


@pytest.mark.parametrize("edit", ["file", "dir", "removed"])
def test_the_workspace_changed_the_empty_directory_conflicts(
    ws: Path, tmp_path: Path, edit: str
) -> None:
    copy, store = copy_of(ws, tmp_path)
    (copy.work / "src" / "empty").rmdir()
    (copy.work / "src" / "empty").write_text("now a file\n")
    mine = ws / "src" / "empty" / "mine"
    if edit == "file":
        mine.write_text("the person's\n")
    elif edit == "dir":
        mine.mkdir()
    else:
        (ws / "src" / "empty").rmdir()
    _, result = apply(copy, store, ws)
    assert result.applied == () and [c.path for c in result.conflicts] == ["src/empty"]
    if edit == "removed":
        assert not (ws / "src" / "empty").exists()
    else:
        assert mine.exists() and "src/empty/mine" in result.conflicts[0].reason


def test_a_directory_the_workspace_added_under_a_replaced_one_conflicts(
    ws: Path, tmp_path: Path
) -> None:
    copy, store = copy_of(ws, tmp_path)
    shutil.rmtree(copy.work / "src")
    (copy.work / "src").write_text("now a file\n")
    (ws / "src" / "deep" / "new").mkdir()
    _, result = apply(copy, store, ws)
    assert result.applied == () and "src/deep/new/" in result.conflicts[0].reason
    assert (ws / "src" / "deep" / "new").is_dir()


def test_a_copy_recorded_without_empty_directories_still_conflicts(
    ws: Path, tmp_path: Path
) -> None:
    """A copy made before empty directories were recorded (its copy.json has none)
    cannot tell an empty directory it started with from one the person made."""
    copy, store = copy_of(ws, tmp_path)
    copy = WorkingCopy(copy.home, copy.record.model_copy(update={"base_empty_dirs": ()}))
    (copy.work / "src" / "empty").rmdir()
    (copy.work / "src" / "empty").write_text("now a file\n")
    _, result = apply(copy, store, ws)
    assert result.applied == () and [c.path for c in result.conflicts] == ["src/empty"]
    assert (ws / "src" / "empty").is_dir()
