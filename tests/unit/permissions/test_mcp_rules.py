"""Permission rules for MCP tools, in Claude Code's forms: `mcp__server` and
`mcp__server__*` cover every tool of the server, `mcp__server__tool` one tool; an
agent's tool list names MCP tools the same ways."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.behavior import Behavior
from orchestrator.errors import PolicyError
from orchestrator.permissions.rules import mcp_offer_patterns, parse_rule, tool_listed


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


@pytest.mark.parametrize(
    ("rule", "covered", "not_covered"),
    [
        # measured with the pinned Claude Code: `allow: mcp__x__p*` allowed mcp__x__poke,
        # `allow: mcp__z*` and `allow: mcp__*k` allowed nothing (the server part is literal)
        ("mcp__db__dr*", ["mcp__db__drop", "mcp__db__dr"], ["mcp__db__query", "mcp__dbx__drop"]),
        ("mcp__db__*o*", ["mcp__db__look", "mcp__db__poke"], ["mcp__db__zap"]),
        ("mcp__db*", [], ["mcp__db__q", "mcp__dbx__q"]),
        ("mcp__*k", [], ["mcp__a__k", "mcp__k"]),
        ("mcp__*", [], ["mcp__db__q"]),
    ],
)
def test_a_star_in_the_tool_part_is_any_text(
    rule: str, covered: list[str], not_covered: list[str]
) -> None:
    parsed = parse_rule(rule, "allow", "cli", "--allow")
    assert all(parsed.applies_to(name) for name in covered)
    assert not any(parsed.applies_to(name) for name in not_covered)


def test_deny_rules_remove_mcp_tools_from_the_offer_by_the_whole_name() -> None:
    """What the pinned Claude Code left out of the tools it offered: `mcp__y` and
    `mcp__z__*` whole servers, `mcp__x*` every server starting with x, `mcp__*` every
    MCP tool; a rule with a specifier, an allow or an ask rule removes nothing."""
    listed: list[tuple[str, Behavior]] = [
        ("mcp__y", "deny"), ("mcp__z__*", "deny"), ("mcp__x*", "deny"), ("mcp__*", "deny"),
        ("mcp__w__poke", "deny"), ("mcp__v__poke(a)", "deny"), ("mcp__u", "ask"),
        ("mcp__t", "allow"), ("Bash", "deny"),
    ]  # fmt: skip
    rules = [parse_rule(text, behavior, "project:s", "permissions") for text, behavior in listed]
    assert mcp_offer_patterns(rules) == (
        "mcp__y__*", "mcp__z__*", "mcp__x*", "mcp__*", "mcp__w__poke",
    )  # fmt: skip


def test_a_malformed_mcp_rule_is_refused() -> None:
    with pytest.raises(PolicyError):
        parse_rule("mcp__db__dr?p", "deny", "cli", "--deny")


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
        # the pinned Claude Code in plan mode: an MCP call asks, whatever the server's
        # readOnlyHint, and an allow rule allows it (plan denies only Claude Code's own
        # writing tools)
        ({"mode": "plan"}, "ask"),
        ({"mode": "plan", "allow": ["mcp__db__query"]}, "allow"),
        ({"mode": "plan", "allow": ["mcp__db"], "deny": ["mcp__db__*"]}, "deny"),
    ],
)
def test_mcp_calls_are_decided_by_rules_and_mode(rules: dict[str, Any], expected: str) -> None:
    from orchestrator.permissions import ToolCall, evaluate
    from tests.unit.permissions.test_paths import policy

    call = ToolCall(tool_name="mcp__db__query", tool_input={"sql": "select 1"})
    assert evaluate(policy(**rules), call).decision.behavior == expected
