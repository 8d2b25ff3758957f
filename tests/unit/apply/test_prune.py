"""`warden cleanup` prunes the content store: content no record names goes; what a
kept working copy, a waiting change set or a held record names stays, also while
a run is reviewing it (the change set is recorded before anyone is asked) and
while a writer holds the store (pruning then waits for another time); a record
that cannot be read stops the pruning altogether."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ApplyReview
from orchestrator.apply.prune import PruneError, prune_store
from orchestrator.apply.review import ApplySettings, ReviewedApply, compute_recorded
from orchestrator.apply.workcopy import content_store, make_working_copy, store_writing
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion, CallbackApprover


def old(path: Path) -> None:
    then = time.time() - 3600
    os.utime(path, (then, then))


def stored(state: Path, sha: str) -> Path:
    return state / "apply" / "content" / sha[:2] / sha


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("base\n")
    return ws


def test_only_what_no_record_names_is_removed(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = content_store(state)
    copy = make_working_copy(ws, state, run_id="r", task_id="sa_1", agent="coder", session="s")
    (copy.work / "a.txt").write_text("agent\n")
    change_set = compute_recorded(copy, store, state)
    orphan = store.put(b"applied long ago, nobody names it\n")
    held_sha = store.put(b"a held change's content\n")
    held = state / "runs" / "run_1" / "held"
    held.mkdir(parents=True)
    (held / "record.json").write_text(json.dumps({"files": [{"sha256": held_sha}]}))
    young = store.put(b"just written, its record not yet\n")
    for sha in (orphan, held_sha, change_set.changes[0].new_sha256 or "", *[
        c.old_sha256 or "" for c in change_set.changes
    ]):  # fmt: skip
        old(stored(state, sha))
    pruned = prune_store(state)
    assert pruned.removed == [orphan] and not store.has(orphan)
    assert store.has(held_sha) and store.has(young)  # named by a held record; young
    (change,) = change_set.changes
    assert change.old_sha256 and change.new_sha256
    assert (
        store.read(change.old_sha256) == b"base\n" and store.read(change.new_sha256) == b"agent\n"
    )
    copy.remove()  # applied or discarded: its content is no longer named
    assert sorted(prune_store(state, grace_s=0).removed) == sorted(
        {change.old_sha256, change.new_sha256, young}
    )


def test_put_again_makes_old_content_young(ws: Path, tmp_path: Path) -> None:
    store = content_store(tmp_path / "state")
    sha = store.put(b"x\n")
    old(stored(tmp_path / "state", sha))
    assert store.put(b"x\n") == sha
    assert prune_store(tmp_path / "state").removed == []


def test_a_writer_holding_the_store_stops_the_pruning(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = content_store(state)
    with store_writing(state):  # a run between putting content and writing its record
        sha = store.put(b"about to be named\n")
        pruned = prune_store(state, grace_s=0)
    assert pruned.busy and pruned.removed == [] and store.has(sha)


def test_an_unreadable_record_stops_the_pruning(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = content_store(state)
    copy = make_working_copy(ws, state, run_id="r", task_id="sa_1", agent="coder", session="s")
    orphan = store.put(b"orphan\n")
    (copy.home / "changes.json").write_text("{not json")
    with pytest.raises(PruneError, match="nothing was pruned"):
        prune_store(state, grace_s=0)
    assert store.has(orphan)


def test_content_under_review_survives_a_pruning(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"

    def approve(q: ApprovalQuestion) -> ApprovalAnswer:
        assert isinstance(q, ApplyReview)
        prune_store(state, grace_s=0)  # `warden cleanup` while the person reads
        return ApprovalAnswer(behavior="allow", channel="t", bound_to=q.change_set.sha256)

    reviewed = ReviewedApply(
        workspace=ws, state_dir=state, settings=ApplySettings(mode="ask"),
        approver=CallbackApprover(approve),
    )  # fmt: skip
    copy = reviewed.make_copy(run_id="r", task_id="sa_1", agent="coder", session="s", owner=(0, 0))
    (copy.work / "a.txt").write_text("agent\n")
    question: dict[str, object] = {"task_id": "sa_1", "agent_type": "coder"}
    decision = asyncio.run(reviewed.conclude(copy, completed=True, question=question))
    assert decision is not None and decision.outcome == "applied", decision
    assert (ws / "a.txt").read_text() == "agent\n"
