"""Permission rules for MCP tools, in Claude Code's forms: `mcp__server` and
`mcp__server__*` cover every tool of the server, `mcp__server__tool` one tool; an
agent's tool list names MCP tools the same ways."""

from __future__ import annotations

import pytest

from orchestrator.errors import PolicyError
from orchestrator.permissions.rules import parse_rule, tool_listed


@pytest.mark.parametrize(
    ("rule", "covered", "not_covered"),
    [
        ("mcp__db", ["mcp__db__query", "mcp__db__drop"], ["mcp__dbx__query", "mcp__other__q"]),
        ("mcp__db__*", ["mcp__db__query"], ["mcp__dbx__query", "mcp__db"]),
        ("mcp__db__query", ["mcp__db__query"], ["mcp__db__drop", "mcp__db__query2"]),
    ],
)
def test_mcp_rule_forms(rule: str, covered: list[str], not_covered: list[str]) -> None:
    parsed = parse_rule(rule, "deny", "cli", "--deny")
    assert all(parsed.applies_to(name) for name in covered)
    assert not any(parsed.applies_to(name) for name in not_covered)


def test_a_star_is_taken_only_as_the_whole_server() -> None:
    with pytest.raises(PolicyError):
        parse_rule("mcp__db__dr*", "deny", "cli", "--deny")


def test_agent_tool_lists_name_mcp_tools_by_server_or_all() -> None:
    assert tool_listed("mcp__db__q", frozenset({"Read", "mcp__db"}))
    assert tool_listed("mcp__db__q", frozenset({"mcp__*"}))
    assert not tool_listed("mcp__db__q", frozenset({"Read", "mcp__web"}))
    assert not tool_listed("Bash", frozenset({"mcp__*"}))


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ({}, "ask"),  # an MCP tool asks by default, as in Claude Code
        ({"allow": ["mcp__db"]}, "allow"),
        ({"allow": ["mcp__db__*"]}, "allow"),
        ({"allow": ["mcp__db__other"]}, "ask"),
        ({"allow": ["mcp__db"], "deny": ["mcp__db__query"]}, "deny"),
        ({"allow": ["mcp__db"], "ask": ["mcp__db__*"]}, "ask"),
        ({"mode": "bypassPermissions", "deny": ["mcp__db"]}, "deny"),
        ({"mode": "dontAsk"}, "deny"),
    ],
)
def test_mcp_calls_are_decided_by_rules_and_mode(rules: dict[str, object], expected: str) -> None:
    from orchestrator.permissions import ToolCall, evaluate
    from tests.unit.permissions.test_paths import policy

    call = ToolCall(tool_name="mcp__db__query", tool_input={"sql": "select 1"})
    assert evaluate(policy(**rules), call).decision.behavior == expected
