"""The tools added for Claude Code's agent files are decided as Claude Code decides
them: NotebookEdit is an edit of its `notebook_path` (Edit and Write rules hold for
it, acceptEdits allows it inside the workspace, plan mode denies it); TaskOutput,
TaskStop and TodoWrite touch only the agent's own state and need no approval in any
mode, nor do ListMcpResourcesTool and ReadMcpResourceTool, while a deny rule naming
them still holds."""

from __future__ import annotations

import pytest

from orchestrator.behavior import Behavior
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import ToolCall, evaluate
from tests.unit.permissions.test_paths import policy


def notebook(pol_kwargs: dict[str, object], path: str) -> Behavior:
    call = ToolCall(tool_name="NotebookEdit", tool_input={"notebook_path": path, "new_source": "x"})
    return evaluate(policy(**pol_kwargs), call).decision.behavior  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rules", "path", "expected"),
    [
        ({"deny": ["Edit(secret/**)"]}, "/workspace/secret/a.ipynb", "deny"),
        ({"allow": ["Edit(nb/**)"]}, "nb/a.ipynb", "allow"),
        ({"allow": ["Edit(nb/**)"]}, "other/a.ipynb", "ask"),
        ({"ask": ["Write(nb/**)"], "mode": "acceptEdits"}, "nb/a.ipynb", "ask"),
        ({"mode": "acceptEdits"}, "a.ipynb", "allow"),
        ({"mode": "acceptEdits"}, "/tmp/a.ipynb", "ask"),
        ({"mode": "plan"}, "a.ipynb", "deny"),
    ],
)
def test_notebook_edit_is_decided_as_an_edit_of_its_path(
    rules: dict[str, object], path: str, expected: Behavior
) -> None:
    assert notebook(rules, path) == expected


def test_a_notebook_edit_without_a_path_is_denied() -> None:
    call = ToolCall(tool_name="NotebookEdit", tool_input={"new_source": "x"})
    decision = evaluate(policy(mode="bypassPermissions"), call).decision
    assert decision.behavior == "deny" and "'notebook_path'" in decision.reason


@pytest.mark.parametrize("tool", ["TaskOutput", "TaskStop", "TodoWrite"])
@pytest.mark.parametrize("mode", ["default", "plan", "dontAsk", "acceptEdits"])
def test_own_state_tools_need_no_approval_but_obey_deny_rules(tool: str, mode: str) -> None:
    call = ToolCall(tool_name=tool, tool_input={"task_id": "bash_1"})
    assert evaluate(policy(mode=mode), call).decision.behavior == "allow"
    assert evaluate(policy(deny=[tool], mode=mode), call).decision.behavior == "deny"


@pytest.mark.parametrize("tool", ["ListMcpResourcesTool", "ReadMcpResourceTool"])
@pytest.mark.parametrize("mode", ["default", "plan", "dontAsk", "acceptEdits"])
def test_mcp_resource_tools_need_no_approval_but_obey_their_rules(tool: str, mode: str) -> None:
    """As the pinned Claude Code runs them: unasked (measured in default and plan
    mode); a deny or ask rule by the tool's name still holds."""
    call = ToolCall(tool_name=tool, tool_input={"server": "notes", "uri": "notes://a"})
    assert evaluate(policy(mode=mode), call).decision.behavior == "allow"
    assert evaluate(policy(deny=[tool], mode=mode), call).decision.behavior == "deny"
    asked = "deny" if mode == "dontAsk" else "ask"
    assert evaluate(policy(ask=[tool], mode=mode), call).decision.behavior == asked
    older = tool.removesuffix("Tool")  # Claude Code's older name, in its alias table
    assert evaluate(policy(deny=[older], mode=mode), call).decision.behavior == "deny"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://docs.test/guide", "allow"),
        ("http://docs.test:8080/x", "allow"),
        ("https://api.docs.test/", "deny"),  # *.docs.test is denied
        ("https://evil.test/?docs.test", "ask"),  # the host decides, not the text
        ("https://docs.test.evil.test/", "ask"),
        ("not a url", "ask"),
    ],
)
def test_webfetch_domain_rules_decide_by_the_urls_host(url: str, expected: Behavior) -> None:
    pol = policy(allow=["WebFetch(domain:docs.test)"], deny=["WebFetch(domain:*.docs.test)"])
    call = ToolCall(tool_name="WebFetch", tool_input={"url": url, "prompt": "p"})
    assert evaluate(pol, call).decision.behavior == expected


@pytest.mark.parametrize(
    ("rule", "call", "expected"),
    [
        # Claude Code names the delegation tool Agent: its rules hold for warden's Task.
        ("Agent(general-purpose)", ("Task", {"subagent_type": "general-purpose"}), "deny"),
        ("Agent(general-purpose)", ("Task", {"subagent_type": "Explore"}), "allow"),
        ("Agent", ("Task", {"subagent_type": "Explore"}), "deny"),
        ("KillShell", ("TaskStop", {"task_id": "bash_1"}), "deny"),
        ("KillBash", ("TaskStop", {"task_id": "bash_1"}), "deny"),
        ("BashOutput", ("TaskOutput", {"task_id": "bash_1"}), "deny"),
    ],
)
def test_a_deny_rule_by_claude_codes_other_name_holds(
    rule: str, call: tuple[str, JSONObject], expected: Behavior
) -> None:
    """A rule written with the name Claude Code uses (its alias table: `Agent` for
    Task, the older shell tools' names) is never one that silently matches nothing."""
    found = evaluate(policy(deny=[rule]), ToolCall(tool_name=call[0], tool_input=call[1]))
    decision = found.decision
    assert decision.behavior == expected
    if expected == "deny":
        assert rule in decision.reason  # the rule as the person wrote it
