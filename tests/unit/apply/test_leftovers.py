"""`warden cleanup` settles the working copies a dead warden left undecided: one
without changes goes, one with changes stays as a waiting change set (nothing
lost), and the copies of a live warden are not touched."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from orchestrator.apply.pending import pending, settle_leftovers
from orchestrator.apply.workcopy import COPY_META, WorkingCopy, make_working_copy
from orchestrator.owner import current


def copy_for(ws: Path, state: Path, task_id: str) -> WorkingCopy:
    return make_working_copy(ws, state, run_id="r", task_id=task_id, agent="a", session="s")


def dead(copy: WorkingCopy, state: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    owner = dataclasses.replace(current(state), pid=gone.pid, start=1)
    record = copy.record.model_copy(update={"owner": owner.to_json()})
    (copy.home / COPY_META).write_text(record.model_dump_json())


def test_cleanup_settles_only_dead_owners_copies(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("f\n")
    state = tmp_path / "state"
    unchanged = copy_for(ws, state, "sa_unchanged")
    changed = copy_for(ws, state, "sa_changed")
    live = copy_for(ws, state, "sa_live")
    (changed.work / "f.txt").write_text("edited\n")
    (live.work / "f.txt").write_text("still working\n")
    dead(unchanged, state)
    dead(changed, state)
    removed, kept = settle_leftovers(state)
    assert (removed, kept) == (["sa_unchanged"], ["sa_changed"])
    assert not unchanged.home.exists()
    by_task = {p.copy.record.task_id: p for p in pending(state)}
    assert set(by_task) == {"sa_changed", "sa_live"}
    waiting = by_task["sa_changed"]
    assert waiting.decision is not None and waiting.decision.outcome == "pending"
    assert by_task["sa_live"].change_set is None  # its warden is alive: untouched
