"""A yes covers exactly the content the person saw: an allow answer to an apply
review applies the change set only when it names the change set's sha256
(`bound_to`); an allow naming nothing (a library callback that knows nothing of
reviews) or another change set is a no, said so, and the workspace is untouched."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ApplyDecision, ApplyReview
from orchestrator.apply.review import ApplySettings, ReviewedApply
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion, CallbackApprover


def conclude(tmp_path: Path, answer: object) -> tuple[Path, ApplyDecision | None]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")

    def approve(q: ApprovalQuestion) -> ApprovalAnswer:
        assert isinstance(q, ApplyReview)
        return answer(q) if callable(answer) else answer  # type: ignore[return-value]

    reviewed = ReviewedApply(
        workspace=ws,
        state_dir=tmp_path / "state",
        settings=ApplySettings(mode="ask"),
        approver=CallbackApprover(approve),
    )
    copy = reviewed.make_copy(run_id="r", task_id="sa_1", agent="coder", session="s", owner=(0, 0))
    (copy.work / "a.txt").write_text("agent\n")
    question: dict[str, object] = {"task_id": "sa_1", "agent_type": "coder"}
    return ws, asyncio.run(reviewed.conclude(copy, completed=True, question=question))


def test_an_allow_that_names_no_change_set_is_a_no(tmp_path: Path) -> None:
    ws, decision = conclude(tmp_path, ApprovalAnswer(behavior="allow", channel="my-pipeline"))
    assert decision is not None and decision.outcome == "rejected_by_person"
    assert (ws / "a.txt").read_text() == "a\n"
    (why,) = decision.reasons
    assert "bound_to" in why.reason and decision.change_set_sha256 in why.reason
    assert "warden apply sa_1" in why.reason


def test_an_allow_naming_another_change_set_is_a_no(tmp_path: Path) -> None:
    stale = ApprovalAnswer(behavior="allow", channel="my-pipeline", bound_to="0" * 64)
    ws, decision = conclude(tmp_path, stale)
    assert decision is not None and decision.outcome == "rejected_by_person"
    assert "another change set" in decision.reasons[0].reason
    assert (ws / "a.txt").read_text() == "a\n"


@pytest.mark.parametrize("name", ["input_hash", "change_set"])
def test_an_allow_bound_to_the_change_set_applies_it(tmp_path: Path, name: str) -> None:
    def yes(q: ApplyReview) -> ApprovalAnswer:
        sha = q.input_hash if name == "input_hash" else q.change_set.sha256
        return ApprovalAnswer(behavior="allow", channel="my-pipeline", bound_to=sha)

    ws, decision = conclude(tmp_path, yes)
    assert decision is not None and decision.outcome == "applied"
    assert (ws / "a.txt").read_text() == "agent\n"
