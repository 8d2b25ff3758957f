"""`Skill` calls are decided as the pinned Claude Code decides them (measured by the
decision differential, `tests/differential/skill_cases.py`): `Skill(name)` rules by
exact name, `/name`, `name:*` and `name *` prefixes; a plain skill loads unasked in
every mode, one with `allowed-tools`/`disallowed-tools`/`hooks` is a question the
mode answers; once loaded, its `allowed-tools` allow the calls after it in the same
model response, and no others."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.behavior import Behavior
from orchestrator.permissions import CallContext, HookSet, PermissionEngine, ToolCall, evaluate
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.skill_rules import SkillGrant, skill_grant
from tests.unit.permissions.test_paths import policy

PLAIN = "---\nname: plain\ndescription: instructions only\n---\n\nSay hello.\n"
TOOLY = (
    "---\nname: tooly\ndescription: needs chmod\n"
    "allowed-tools: Bash(chmod:*), Read\n---\n\nRun chmod.\n"
)
DENIER = "---\ndescription: d\ndisallowed-tools: Write\n---\nx\n"


def skills_policy(**rules: object) -> EffectivePolicy:
    base = policy(**rules)  # type: ignore[arg-type]
    grants = (
        skill_grant("plain", PLAIN),
        skill_grant("tooly", TOOLY),
        skill_grant("toolbox", PLAIN),
        skill_grant("denier", DENIER),
    )
    return base.model_copy(update={"skills": grants})


def load(pol: EffectivePolicy, name: str) -> Behavior:
    call = ToolCall(tool_name="Skill", tool_input={"skill": name})
    return evaluate(pol, call).decision.behavior


def test_a_grant_reads_allowed_tools_as_claude_code_splits_them() -> None:
    assert skill_grant("tooly", TOOLY) == SkillGrant(
        name="tooly", allowed_tools=("Bash(chmod:*)", "Read"), plain=False
    )
    listed = "---\nallowed-tools:\n  - Bash(git add:*) Bash(git status)\n  - Grep\n---\n"
    assert skill_grant("g", listed).allowed_tools == ("Bash(git add:*)", "Bash(git status)", "Grep")
    assert skill_grant("plain", PLAIN).plain
    assert not skill_grant("denier", DENIER).plain
    hooks = "---\nhooks:\n  PreToolUse: []\n  Stop: [{hooks: []}]\n---\n"
    assert not skill_grant("h", hooks).plain
    assert skill_grant("bad", "---\nallowed-tools: [unclosed\n---\n").plain  # ignored, as CC


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ({}, {"plain": "allow", "toolbox": "allow", "tooly": "ask", "denier": "ask"}),
        ({"allow": ["Skill(tooly)"]}, {"tooly": "allow", "denier": "ask"}),
        ({"allow": ["Skill(/tooly)"]}, {"tooly": "allow"}),
        ({"allow": ["Skill(too:*)"]}, {"tooly": "allow", "denier": "ask"}),
        ({"allow": ["Skill(tool *)"]}, {"tooly": "allow"}),
        ({"allow": ["Skill"]}, {"tooly": "allow", "denier": "allow"}),
        ({"deny": ["Skill(plain)"]}, {"plain": "deny", "toolbox": "allow"}),
        ({"deny": ["Skill(tool:*)"]}, {"tooly": "deny", "toolbox": "deny", "plain": "allow"}),
        ({"deny": ["Skill"]}, {"plain": "deny"}),
        ({"ask": ["Skill"]}, {"plain": "ask", "toolbox": "ask"}),
        # stricter than Claude Code, which ignores a named ask rule (documented)
        ({"ask": ["Skill(plain)"]}, {"plain": "ask", "toolbox": "allow"}),
        ({"mode": "plan"}, {"plain": "allow", "tooly": "ask"}),
        ({"mode": "acceptEdits"}, {"plain": "allow", "tooly": "ask"}),
        ({"mode": "dontAsk"}, {"plain": "allow", "tooly": "deny"}),
        ({"mode": "bypassPermissions"}, {"plain": "allow", "tooly": "allow"}),
        ({"mode": "dontAsk", "allow": ["Skill(tooly)"]}, {"tooly": "allow"}),
    ],
)
def test_skill_calls_are_decided_as_claude_code_decides_them(
    rules: dict[str, object], expected: dict[str, Behavior]
) -> None:
    pol = skills_policy(**rules)
    assert {name: load(pol, name) for name in expected} == expected


def test_a_skill_call_without_a_name_is_denied() -> None:
    call = ToolCall(tool_name="Skill", tool_input={"skill": " "})
    assert evaluate(skills_policy(), call).decision.behavior == "deny"


def chmod(engine: PermissionEngine) -> Behavior:
    call = ToolCall(tool_name="Bash", tool_input={"command": "chmod 644 README.md"})
    return asyncio.run(engine.evaluate(call, CallContext())).behavior


def test_a_loaded_skill_allows_its_tools_until_the_model_answers_again() -> None:
    engine = PermissionEngine(skills_policy(), HookSet(), workspace_host=None)
    assert chmod(engine) == "ask"
    engine.skill_loaded("tooly")
    assert chmod(engine) == "allow"
    decision = engine.evaluate_rules(
        ToolCall(tool_name="Bash", tool_input={"command": "chmod 644 README.md"}), CallContext()
    )
    assert decision.rule == "Bash(chmod:*)" and decision.source == "skill tooly"
    engine.turn_ended()
    assert chmod(engine) == "ask"
    assert engine.policy.rules == skills_policy().rules


@pytest.mark.parametrize("rule", ["deny", "ask"])
def test_deny_and_ask_rules_win_over_a_loaded_skill(rule: str) -> None:
    engine = PermissionEngine(
        skills_policy(**{rule: ["Bash(chmod:*)"]}), HookSet(), workspace_host=None
    )
    engine.skill_loaded("tooly")
    assert chmod(engine) == rule


def test_a_skill_the_run_does_not_know_grants_nothing() -> None:
    engine = PermissionEngine(skills_policy(), HookSet(), workspace_host=None)
    engine.skill_loaded("nope")
    engine.skill_loaded("plain")
    assert chmod(engine) == "ask"
    assert engine.policy.loaded_skills == ("plain",)


def test_a_skill_the_model_may_not_invoke_grants_nothing() -> None:
    """`disable-model-invocation: true`: the Skill tool refuses it before any
    permission (Claude Code's order), so no question is asked and nothing is granted."""
    hidden = "---\ndisable-model-invocation: true\nallowed-tools: Bash(chmod:*)\n---\nx\n"
    grant = skill_grant("hidden", hidden)
    assert not grant.invocable and not grant.plain
    pol = policy().model_copy(update={"skills": (grant,)})
    assert load(pol, "hidden") == "allow"  # the runner answers with the refusal
    engine = PermissionEngine(pol, HookSet(), workspace_host=None)
    engine.skill_loaded("hidden")
    assert chmod(engine) == "ask"
