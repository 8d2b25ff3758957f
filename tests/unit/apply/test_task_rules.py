"""A change set is decided by the rules its task ran under, not the run's: the
agent file's `permissionMode` (and its ancestors' narrowing) holds at apply time as
it held for the task's own calls, so a path that task could not have edited
unasked (an `ask` rule under `dontAsk`) is rejected before anyone is asked. The
agent's tool list is not a path rule: a change written with Bash is held to the
same rules and mode its Bash writes were."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.agents.registry import AgentRegistry
from orchestrator.apply.changeset import ApplyDecision
from orchestrator.apply.policy import edit_rules
from orchestrator.apply.review import ApplySettings, ReviewedApply
from orchestrator.config import Settings
from orchestrator.permissions import EffectivePolicy, load_hooks, load_policy
from orchestrator.permissions.approvers import NonInteractiveApprover
from orchestrator.runtime.gate import PolicyGate
from orchestrator.runtime.tasks import TaskContext


def run_policy(tmp_path: Path) -> tuple[Settings, Path, EffectivePolicy]:
    """The run's rules: editing docs/ asks, in the default mode."""
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "a.md").write_text("a\n")
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    (ws / ".claude").mkdir()
    (ws / ".claude" / "settings.json").write_text('{"permissions": {"ask": ["Edit(docs/**)"]}}')
    return settings, ws, load_policy(settings, ws, mode="default", trusted=True)


def conclude(
    tmp_path: Path, ws: Path, run: EffectivePolicy, rules: EffectivePolicy | None
) -> ApplyDecision | None:
    reviewed = ReviewedApply(
        workspace=ws, state_dir=tmp_path / "state", settings=ApplySettings(mode="auto"),
        approver=NonInteractiveApprover(), edit=edit_rules(run, ws),
    )  # fmt: skip
    copy = reviewed.make_copy(run_id="r", task_id="sa_1", agent="scribe", session="s", owner=(0, 0))
    (copy.work / "docs" / "a.md").write_text("the scribe's\n")
    question: dict[str, object] = {"task_id": "sa_1", "agent_type": "scribe"}
    return asyncio.run(reviewed.conclude(copy, completed=True, question=question, rules=rules))


def test_the_tasks_mode_decides_its_change_set(tmp_path: Path) -> None:
    _, ws, run = run_policy(tmp_path)
    decision = conclude(tmp_path, ws, run, rules=run.with_mode("dontAsk", "agent scribe"))
    assert decision is not None and decision.outcome == "rejected_by_policy"
    (reason,) = decision.reasons
    assert reason.path == "docs/a.md" and "dontAsk" in reason.reason
    assert reason.rule == "Edit(docs/**)"
    assert (ws / "docs" / "a.md").read_text() == "a\n"


def test_under_the_runs_own_rules_the_ask_is_no_rejection(tmp_path: Path) -> None:
    _, ws, run = run_policy(tmp_path)
    decision = conclude(tmp_path, ws, run, rules=run)
    assert decision is not None and decision.outcome == "applied"
    assert (ws / "docs" / "a.md").read_text() == "the scribe's\n"


def test_the_tool_list_is_not_a_path_rule(tmp_path: Path) -> None:
    _, ws, run = run_policy(tmp_path)
    bash_only = run.model_copy(update={"allowed_tools": frozenset({"Bash", "Read"})})
    decision = conclude(tmp_path, ws, run, rules=bash_only)
    assert decision is not None and decision.outcome == "applied", decision


def test_the_gate_gives_a_task_the_policy_its_agent_narrows(tmp_path: Path) -> None:
    settings, ws, run = run_policy(tmp_path)
    gate = PolicyGate(
        policy=run, hooks=load_hooks(settings, ws), workspace_host=ws,
        approver=NonInteractiveApprover(),
    )  # fmt: skip
    plain = AgentRegistry.load(settings, ws).get("general-purpose")
    scribe = plain.model_copy(update={"name": "scribe", "permission_mode": "dontAsk"})
    task = TaskContext(task_id="sa_1", session_id="sa_1", run_id="r", trace_id="t",
                       parent_id=None, depth=1, agent=scribe, description="d", timeout_s=5)  # fmt: skip
    assert gate.task_policy(task).mode == "dontAsk"
    assert gate.policy.mode == "default"
