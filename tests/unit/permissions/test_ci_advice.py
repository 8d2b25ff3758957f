"""A denial in CI suggests a rule that allows exactly the denied call, never a prefix
that allows more (`Bash(python3 -c:*)` would allow any code); the suggested rule,
added, allows that call and not its neighbours."""

from __future__ import annotations

import asyncio
import re
import shlex

import pytest

from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import ToolCall, evaluate
from orchestrator.permissions.approvers import ApprovalQuestion, NonInteractiveApprover
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.sources import PolicySource, merge


def advice(tool: str, tool_input: JSONObject) -> str:
    q = ApprovalQuestion(
        task_id="t",
        agent_type="bash",
        tool_name=tool,
        tool_input=tool_input,
        input_hash="h",
        asked_by="mode",
    )
    return asyncio.run(NonInteractiveApprover().approve(q)).reason or ""


def suggested(text: str) -> list[str]:
    found = re.search(r"add --allow (.*) \(or the same rule", text)
    assert found, text
    return [w for w in shlex.split(found.group(1)) if w != "--allow"]


def decide(rules: list[str], tool: str, tool_input: JSONObject) -> str:
    pol = merge([PolicySource("cli", [parse_rule(r, "allow", "cli", "t") for r in rules])])
    return evaluate(pol, ToolCall(tool_name=tool, tool_input=tool_input)).decision.behavior


@pytest.mark.parametrize(
    ("command", "neighbour"),
    [
        ("python3 -c pass", "python3 -c 'import os; os.system(\"x\")'"),
        ("npm run build", "npm run deploy"),
        ("git diff && git status", "git push"),
        ("make test", "make install"),
    ],
)
def test_bash_advice_allows_only_the_call(command: str, neighbour: str) -> None:
    rules = suggested(advice("Bash", {"command": command}))
    assert all(":*" not in r and "*" not in r for r in rules)
    assert decide(rules, "Bash", {"command": command}) == "allow"
    assert decide(rules, "Bash", {"command": neighbour}) == "ask"


def test_path_advice_names_the_one_file() -> None:
    rules = suggested(advice("Write", {"file_path": "src/a.py", "content": ""}))
    assert rules == ["Write(//workspace/src/a.py)"]
    assert decide(rules, "Write", {"file_path": "src/a.py", "content": ""}) == "allow"
    assert decide(rules, "Write", {"file_path": "other/src/a.py", "content": ""}) == "ask"


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Bash", {"command": "cat $(ls)"}),
        ("Bash", {"command": "ls | xargs rm"}),
        ("Write", {"file_path": "src/*.py", "content": ""}),
        ("Task", {"description": "d", "prompt": "p", "subagent_type": "x"}),
    ],
)
def test_no_rule_is_suggested_when_none_is_exact(tool: str, tool_input: JSONObject) -> None:
    text = advice(tool, tool_input)
    assert "--allow" not in text and "No rule can allow just this call" in text
