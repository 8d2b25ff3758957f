"""Waiting change sets: `warden apply TASK` merges the recorded change set (its
content from the store, not the copy), refuses one policy rejected, keeps a
conflicting one waiting; `warden discard TASK` removes it; a task id that is not
one never names a path outside the apply directory; `ps --pending` lists them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.apply.changeset import ApplyDecision, PathReason
from orchestrator.apply.compute import compute_change_set
from orchestrator.apply.pending import (
    NoSuchChangeSetError,
    RejectedChangeSetError,
    apply_pending,
    discard_pending,
    pending,
)
from orchestrator.apply.policy import ApplyPolicy
from orchestrator.apply.review import record
from orchestrator.apply.workcopy import WorkingCopy, content_store, make_working_copy
from orchestrator.cli import cli


def waiting(tmp_path: Path, outcome: str = "pending") -> tuple[Path, Path, WorkingCopy]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    state = tmp_path / "state"
    copy = make_working_copy(ws, state, run_id="r", task_id="sa_1", agent="coder", session="s")
    (copy.work / "a.txt").write_text("agent\n")
    change_set, _ = compute_change_set(copy, content_store(state))
    decision = ApplyDecision(
        task_id="sa_1", change_set_sha256=change_set.sha256, outcome=outcome,  # type: ignore[arg-type]
        reasons=(PathReason(path="a.txt", reason="because"),), decided_by="never",
    )  # fmt: skip
    record(copy, change_set, decision)
    return ws, state, copy


def test_apply_writes_the_recorded_content(tmp_path: Path) -> None:
    ws, state, copy = waiting(tmp_path)
    (copy.work / "a.txt").write_text("changed later\n")  # not what was recorded
    decision = apply_pending(state, "sa_1", "cli:me", policy=ApplyPolicy())
    assert decision.outcome == "applied" and decision.applied == ("a.txt",)
    assert (ws / "a.txt").read_text() == "agent\n"
    assert pending(state) == []


def test_a_policy_rejection_is_not_overruled(tmp_path: Path) -> None:
    ws, state, _ = waiting(tmp_path, "rejected_by_policy")
    with pytest.raises(RejectedChangeSetError, match="warden discard sa_1"):
        apply_pending(state, "sa_1", "cli:me", policy=ApplyPolicy())
    assert (ws / "a.txt").read_text() == "a\n"


def test_a_conflict_keeps_it_waiting(tmp_path: Path) -> None:
    ws, state, _ = waiting(tmp_path)
    (ws / "a.txt").write_text("person\n")
    decision = apply_pending(state, "sa_1", "cli:me", policy=ApplyPolicy())
    assert decision.outcome == "conflicted" and decision.conflicts == ("a.txt",)
    assert (ws / "a.txt").read_text() == "person\n"
    (item,) = pending(state)
    assert item.decision is not None and item.decision.outcome == "conflicted"


def test_discard_and_bad_ids(tmp_path: Path) -> None:
    _, state, copy = waiting(tmp_path)
    for bad in ("../../etc", "sa_2", ".", ""):
        with pytest.raises(NoSuchChangeSetError):
            discard_pending(state, bad)
    discard_pending(state, "sa_1")
    assert not copy.home.exists()


def test_the_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, state, _ = waiting(tmp_path)
    monkeypatch.setenv("WARDEN_STATE_DIR", str(state))
    runner = CliRunner()
    listed = runner.invoke(cli, ["ps", "--pending"])
    assert listed.exit_code == 0 and "sa_1" in listed.output and "pending" in listed.output
    done = runner.invoke(cli, ["apply", "sa_1"])
    assert done.exit_code == 0, done.output
    assert "modified" in done.output and (ws / "a.txt").read_text() == "agent\n"
    missing = runner.invoke(cli, ["discard", "sa_1"])
    assert isinstance(missing.exception, NoSuchChangeSetError)
    assert "warden ps --pending" in str(missing.exception)
