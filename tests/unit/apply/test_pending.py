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
    ChangedChangeSetError,
    NoSuchChangeSetError,
    RejectedChangeSetError,
    StillDecidingError,
    apply_pending,
    discard_pending,
    pending,
    waiting_change_set,
)
from orchestrator.apply.policy import ApplyPolicy
from orchestrator.apply.review import load_change_set, record
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


def sha(copy: WorkingCopy) -> str:
    change_set = load_change_set(copy)
    assert change_set is not None
    return change_set.sha256


def test_apply_writes_the_recorded_content(tmp_path: Path) -> None:
    ws, state, copy = waiting(tmp_path)
    (copy.work / "a.txt").write_text("changed later\n")  # not what was recorded
    decision = apply_pending(state, "sa_1", "cli:me", sha256=sha(copy), policy=ApplyPolicy())
    assert decision.outcome == "applied" and decision.applied == ("a.txt",)
    assert (ws / "a.txt").read_text() == "agent\n"
    assert pending(state) == []


def test_a_policy_rejection_is_not_overruled(tmp_path: Path) -> None:
    ws, state, copy = waiting(tmp_path, "rejected_by_policy")
    with pytest.raises(RejectedChangeSetError, match="warden discard sa_1"):
        apply_pending(state, "sa_1", "cli:me", sha256=sha(copy), policy=ApplyPolicy())
    assert (ws / "a.txt").read_text() == "a\n"


def test_a_conflict_keeps_it_waiting(tmp_path: Path) -> None:
    ws, state, copy = waiting(tmp_path)
    (ws / "a.txt").write_text("person\n")
    decision = apply_pending(state, "sa_1", "cli:me", sha256=sha(copy), policy=ApplyPolicy())
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
    ws, state, copy = waiting(tmp_path)
    monkeypatch.setenv("WARDEN_STATE_DIR", str(state))
    runner = CliRunner()
    listed = runner.invoke(cli, ["ps", "--pending"])
    assert listed.exit_code == 0 and "sa_1" in listed.output and "pending" in listed.output
    digest = sha(copy)
    done = runner.invoke(cli, ["apply", "sa_1", "--hash", f"sha256:{digest}"])
    assert done.exit_code == 0, done.output
    assert digest in done.output and (ws / "a.txt").read_text() == "agent\n"
    missing = runner.invoke(cli, ["discard", "sa_1"])
    assert isinstance(missing.exception, NoSuchChangeSetError)
    assert "warden ps --pending" in str(missing.exception)


def test_without_a_terminal_a_yes_must_name_the_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, state, copy = waiting(tmp_path)
    monkeypatch.setenv("WARDEN_STATE_DIR", str(state))
    runner = CliRunner()
    bare = runner.invoke(cli, ["apply", "sa_1"])  # not a terminal, no --hash: nothing applied
    assert bare.exit_code == 2
    assert "│-a" in bare.output and "│+agent" in bare.output  # the rendered review, not a list
    assert f"warden apply sa_1 --hash sha256:{sha(copy)}" in bare.output
    shown = runner.invoke(cli, ["apply", "sa_1", "--show"])
    assert shown.exit_code == 0 and "│+agent" in shown.output and sha(copy) in shown.output
    assert (ws / "a.txt").read_text() == "a\n"
    for wrong in ("sha256:" + "0" * 64, sha(copy)[:16], "nonsense"):
        refused = runner.invoke(cli, ["apply", "sa_1", "--hash", wrong])
        assert isinstance(refused.exception, ChangedChangeSetError), refused.output
        assert "--show" in str(refused.exception) or "64 hex" in str(refused.exception)
    assert (ws / "a.txt").read_text() == "a\n"
    (item,) = pending(state)
    assert item.decision is not None and item.decision.outcome == "pending"


def test_a_change_set_a_live_run_is_deciding_is_not_applied(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    state = tmp_path / "state"
    copy = make_working_copy(ws, state, run_id="r", task_id="sa_2", agent="coder", session="s")
    (copy.work / "a.txt").write_text("running\n")  # its task still runs (this process)
    with pytest.raises(StillDecidingError, match="still running"):
        waiting_change_set(state, "sa_2")
    assert (ws / "a.txt").read_text() == "a\n"
