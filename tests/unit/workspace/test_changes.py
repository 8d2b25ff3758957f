"""Files changed per task come from the workspace itself: a write by any means
(Bash included) is seen, a rewrite that restores size and mtime is still seen, a
task that overlapped another is marked `shared` rather than blamed, the scan is
bounded and says when it was cut short, and the result and summary carry it; a
directory a sandbox swaps for a link mid-scan is not walked through."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from orchestrator.results.build import task_summaries
from orchestrator.results.models import Event
from orchestrator.results.summary import files_cell
from orchestrator.store import TaskRecord, TaskStatus
from orchestrator.workspace.changes import TaskChanges, compare, take_snapshot
from tests.unit.workspace.racing import swap_when_touched


def test_created_modified_deleted_and_relinked_files_are_seen(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "same.txt").write_text("abc")
    (tmp_path / "gone.txt").write_text("x")
    (tmp_path / "kept.txt").write_text("kept")
    (tmp_path / "link").symlink_to("kept.txt")
    (tmp_path / ".git" / "objects" / "ab").mkdir(parents=True)
    before = take_snapshot(tmp_path)
    stat = (tmp_path / "src" / "same.txt").stat()
    (tmp_path / "src" / "same.txt").write_text("xyz")  # same size...
    os.utime(tmp_path / "src" / "same.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ...and mtime
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "new.txt").write_text("new")
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("src/same.txt")
    (tmp_path / ".git" / "objects" / "ab" / "cdef").write_text("blob")  # not walked
    paths, count = compare(before, take_snapshot(tmp_path))
    assert paths == [
        "/workspace/gone.txt",
        "/workspace/link",
        "/workspace/new.txt",
        "/workspace/src/same.txt",
    ]
    assert count == 4


def test_a_cut_short_scan_compares_only_what_both_scans_saw(tmp_path: Path) -> None:
    for name in ("a", "b", "c", "d"):
        (tmp_path / name).write_text(name)
    before = take_snapshot(tmp_path, limit=2)
    assert before.truncated
    (tmp_path / "a").write_text("changed")
    (tmp_path / "aa").write_text("new, inside the horizon")
    (tmp_path / "d").write_text("changed, past the horizon")
    after = take_snapshot(tmp_path, limit=2)
    paths, count = compare(before, after)
    # "aa" pushes "b" past the second scan's end: "b" is not called deleted, and "d"
    # (past both ends) is not seen, which `truncated` announces.
    assert paths == ["/workspace/a", "/workspace/aa"] and count == 2


async def test_a_task_alone_is_sole_and_overlapping_tasks_are_shared(tmp_path: Path) -> None:
    changes = TaskChanges(tmp_path)
    await changes.begin("sa_alone")
    (tmp_path / "by_bash.txt").write_text("x")
    alone = await changes.end("sa_alone")
    assert alone is not None and alone.attribution == "sole"
    assert alone.paths == ["/workspace/by_bash.txt"] and not alone.truncated

    await changes.begin("sa_one")
    await changes.begin("sa_two")
    (tmp_path / "two.txt").write_text("x")
    one, two = await asyncio.gather(changes.end("sa_one"), changes.end("sa_two"))
    assert one is not None and two is not None
    assert (one.attribution, two.attribution) == ("shared", "shared")
    assert one.paths == two.paths == ["/workspace/two.txt"]
    assert await changes.end("sa_never_began") is None


def test_the_result_and_summary_carry_the_changes() -> None:
    task = TaskRecord(
        task_id="sa_a", run_id="run_x", parent_id=None, session_id="sa_a",
        agent_type="bash", description="d", prompt="p", status=TaskStatus.COMPLETED, depth=1,
        created_at=1.0,
    )  # fmt: skip
    end = Event(
        kind="task_completed", run_id="run_x", task_id="sa_a",
        data={"status": "completed", "files_changed": ["/workspace/x", 7],
              "files_changed_count": 3, "files_attribution": "shared",
              "files_scan_truncated": True},
    )  # fmt: skip
    (summary,), _ = task_summaries([task], [end], [])
    assert summary.files_changed == ["/workspace/x"]  # a non-path from the event is dropped
    assert (summary.files_changed_count, summary.files_attribution) == (3, "shared")
    assert files_cell(summary) == "3+ shared"
    (unmeasured,), _ = task_summaries([task], [], [])
    assert unmeasured.files_attribution == "unknown" and files_cell(unmeasured) == "-"


async def test_tasks_that_begin_together_share_one_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.workspace import changes as module

    taken: list[int] = []

    def counting(workspace: Path, *, limit: int) -> object:
        taken.append(limit)
        return take_snapshot(workspace, limit=limit)

    monkeypatch.setattr(module, "take_snapshot", counting)
    tracker = TaskChanges(tmp_path)
    await asyncio.gather(*(tracker.begin(f"sa_{i}") for i in range(10)))
    assert len(taken) == 1  # one walk for the burst
    (tmp_path / "x").write_text("x")
    ended = await asyncio.gather(*(tracker.end(f"sa_{i}") for i in range(10)))
    assert len(taken) == 11  # but each end looks after its own sandbox is gone
    assert all(c is not None and c.paths == ["/workspace/x"] for c in ended)
    assert {c.attribution for c in ended if c is not None} == {"shared"}


def test_a_directory_swapped_for_a_link_mid_scan_lists_no_host_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, host = tmp_path / "ws", tmp_path / "host"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "mine.txt").write_text("x")
    host.mkdir()
    (host / "id_rsa").write_text("host secret")
    before = take_snapshot(ws)

    def to_link() -> None:  # a sandbox, after the scan saw `sub` was a directory
        (ws / "sub").rename(tmp_path / "moved")
        (ws / "sub").symlink_to(host)

    swap_when_touched(monkeypatch, "sub", to_link)
    paths, _ = compare(before, take_snapshot(ws))
    assert paths == ["/workspace/sub/mine.txt"]  # removed from sight; no host name listed
