"""A `PreApply` hook answering "ask" (Claude Code's `permissionDecision` shape) sends
the change set to a person even under `--apply auto`; with nobody to ask it waits,
the hook's reason recorded; "deny" still rejects it before anyone is asked. The
hooks are real processes (trusted, so they run on the host)."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ApplyDecision, ApplyReview
from orchestrator.apply.review import ApplyMode, ApplySettings, ReviewedApply
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    Approver,
    CallbackApprover,
    NonInteractiveApprover,
)
from orchestrator.permissions.hooks import HookSet
from orchestrator.permissions.hooks.definitions import HookCommand


def hook_saying(decision: str, reason: str) -> HookSet:
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PreApply",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }
    command = f"cat >/dev/null; printf %s {shlex.quote(json.dumps(out))}"
    hook = HookCommand(
        event="PreApply", matcher="*", command=command, timeout_s=30, source="test", trusted=True
    )
    return HookSet(hooks=(hook,))


def conclude(
    tmp_path: Path, hooks: HookSet, approver: Approver, mode: ApplyMode = "auto"
) -> tuple[Path, ApplyDecision | None]:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True)
    (ws / "a.txt").write_text("a\n")
    reviewed = ReviewedApply(
        workspace=ws, state_dir=tmp_path / "state", settings=ApplySettings(mode=mode),
        approver=approver, hooks=hooks,
    )  # fmt: skip
    copy = reviewed.make_copy(run_id="r", task_id="sa_1", agent="coder", session="s", owner=(0, 0))
    (copy.work / "a.txt").write_text("agent\n")
    question: dict[str, object] = {"task_id": "sa_1", "agent_type": "coder"}
    return ws, asyncio.run(reviewed.conclude(copy, completed=True, question=question))


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_ask_sends_it_to_a_person_even_under_auto(tmp_path: Path, answer: str) -> None:
    asked: list[ApplyReview] = []

    def person(q: ApprovalQuestion) -> ApprovalAnswer:
        assert isinstance(q, ApplyReview)
        asked.append(q)
        bound = q.change_set.sha256 if answer == "allow" else ""
        return ApprovalAnswer(behavior=answer, channel="t", person="p", bound_to=bound)  # type: ignore[arg-type]

    hooks = hook_saying("ask", "touches the billing code: a person must look")
    ws, decision = conclude(tmp_path, hooks, CallbackApprover(person))
    (review,) = asked
    assert "touches the billing code: a person must look" in review.reason
    assert decision is not None
    if answer == "allow":
        assert decision.outcome == "applied" and decision.decided_by == "t:p"
        assert (ws / "a.txt").read_text() == "agent\n"
    else:
        assert decision.outcome == "rejected_by_person"
        assert (ws / "a.txt").read_text() == "a\n"


def test_ask_with_nobody_to_ask_waits(tmp_path: Path) -> None:
    hooks = hook_saying("ask", "a person must look")
    ws, decision = conclude(tmp_path, hooks, NonInteractiveApprover())
    assert decision is not None and decision.outcome == "pending"
    assert any(r.reason == "a person must look" for r in decision.reasons)
    assert (ws / "a.txt").read_text() == "a\n"


def test_allow_skips_no_review_and_deny_still_rejects(tmp_path: Path) -> None:
    nobody = NonInteractiveApprover()
    _, decision = conclude(tmp_path / "1", hook_saying("allow", "fine"), nobody, "ask")
    assert decision is not None and decision.outcome == "pending"  # still needs a person
    _, decision = conclude(tmp_path / "2", hook_saying("deny", "no"), nobody)
    assert decision is not None and decision.outcome == "rejected_by_policy"
