"""The model API is egress: the broker's gate (`check_request`) forwards a server tool,
an MCP server or a URL source only when a permission rule allows it AND the
subagent's egress reaches its destination; `network: none` gets none of them, web
tools always leave with an explicit `allowed_domains` inside the egress allowlist,
and an unknown tool type is refused, never forwarded as a client tool."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.broker.forwarding import ForwardingRefused, check_request
from orchestrator.broker.forwarding_policy import ForwardingPolicy
from orchestrator.egress.provider import RuleSetEgress, provider_egress
from orchestrator.egress.rules import RuleSet
from orchestrator.egress.rules import parse_rule as egress_rule
from orchestrator.egress.sources import agent_rules
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import parse_rule
from tests.json_shapes import arr, obj

EVERY_RULE = (
    "WebFetch",
    "WebSearch",
    "CodeExecution",
    "ServerTool(brand_new_20990101)",
    "ServerTool(bash_20991231)",
    "mcp__docs",
)


def egress(
    allow: tuple[str, ...] = (), deny: tuple[str, ...] = (), ask: tuple[str, ...] = ()
) -> RuleSet:
    rules = [egress_rule(d, "deny", "test", "t") for d in deny]
    rules += [egress_rule(d, "ask", "test", "t") for d in ask]
    rules += [egress_rule(d, "allow", "test", "t") for d in allow]
    return RuleSet(tuple(rules))


def gate(rules: RuleSet | None, *allow: str, deny: tuple[str, ...] = ()) -> ForwardingPolicy:
    parsed = [parse_rule(r, "allow", "test", "t") for r in allow]
    parsed += [parse_rule(r, "deny", "test", "t") for r in deny]
    return ForwardingPolicy.from_rules(parsed, provider_egress(rules))


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


def url_image(url: str) -> dict[str, Any]:
    block = {"type": "image", "source": {"type": "url", "url": url}}
    return {"messages": [{"role": "user", "content": [block]}]}


FETCH = {"type": "web_fetch_20250910", "name": "web_fetch"}
SEARCH = {"type": "web_search_20250305", "name": "web_search"}
MCP = {"type": "url", "url": "https://docs.test/mcp", "name": "docs"}
SERVER_PARTS = {
    "web_fetch": {"tools": [FETCH]},
    "web_search": {"tools": [SEARCH]},
    "code_execution": {"tools": [{"type": "code_execution_20250825", "name": "c"}]},
    "unknown_type": {"tools": [{"type": "brand_new_20990101", "name": "n"}]},
    "client_looking_unknown_version": {"tools": [{"type": "bash_20991231", "name": "bash"}]},
    "mcp_server": {"mcp_servers": [MCP]},
    "url_source": url_image("https://docs.test/a.png"),
}


@pytest.mark.parametrize("part", SERVER_PARTS)
def test_a_subagent_without_egress_gets_no_server_tool_whatever_the_rules(part: str) -> None:
    with pytest.raises(ForwardingRefused) as refused:
        check_request(gate(None, *EVERY_RULE), body(**SERVER_PARTS[part]), None)
    assert "no network egress" in str(refused.value)
    assert any(not d.allowed and d.decided_by == "egress: none" for d in refused.value.decisions)


def test_an_agent_file_saying_allowed_domains_empty_is_no_egress() -> None:
    narrowed = agent_rules(egress(("docs.test",)), "a", "a.md", {"network": {"allowedDomains": []}})
    with pytest.raises(ForwardingRefused, match="no network egress"):
        check_request(gate(narrowed, "WebFetch"), body(tools=[FETCH]), None)


def test_web_tools_leave_with_the_egress_allowlist_as_allowed_domains() -> None:
    rules = egress(("docs.test", "pypi.test", "*.wild.test", "tcp://db.test:5432"))
    forwarded = check_request(
        gate(rules, "WebFetch", "WebSearch"), body(tools=[FETCH, SEARCH]), None
    )
    # Only exact host rules become API domains (a wildcard would add its apex, a raw
    # TCP rule is not for HTTP).
    assert [obj(t)["allowed_domains"] for t in arr(forwarded.body["tools"])] == [
        ["docs.test", "pypi.test"]
    ] * 2


def test_permission_domain_rules_and_egress_are_both_required() -> None:
    rules = egress(("docs.test", "pypi.test"))
    policy = gate(rules, "WebFetch(domain:docs.test)", "WebFetch(domain:other.test)")
    forwarded = check_request(policy, body(tools=[FETCH]), None)
    assert obj(arr(forwarded.body["tools"])[0])["allowed_domains"] == ["docs.test"]
    with pytest.raises(ForwardingRefused, match=r"other\.test"):
        check_request(policy, body(tools=[{**FETCH, "allowed_domains": ["other.test"]}]), None)


def test_requested_domains_outside_the_egress_are_refused() -> None:
    policy = gate(egress(("docs.test",)), "WebFetch")
    ok = check_request(policy, body(tools=[{**FETCH, "allowed_domains": ["docs.test"]}]), None)
    assert obj(arr(ok.body["tools"])[0])["allowed_domains"] == ["docs.test"]
    for asked in (["evil.test"], ["docs.test", "evil.test"], ["sub.docs.test"], ["10.0.0.1"]):
        with pytest.raises(ForwardingRefused, match=r"not reachable|an IP address"):
            check_request(policy, body(tools=[{**FETCH, "allowed_domains": asked}]), None)


def test_a_domain_whose_subdomain_is_denied_is_not_an_api_domain() -> None:
    """The API's domain covers its subdomains: a deny rule under it keeps it out."""
    rules = egress(("example.test", "ok.test"), deny=("secret.example.test",))
    policy = gate(rules, "WebFetch")
    forwarded = check_request(policy, body(tools=[FETCH]), None)
    assert obj(arr(forwarded.body["tools"])[0])["allowed_domains"] == ["ok.test"]
    with pytest.raises(ForwardingRefused, match=r"secret\.example\.test"):
        check_request(policy, body(tools=[{**FETCH, "allowed_domains": ["example.test"]}]), None)


def test_ask_rules_and_blocked_domains_alone_are_refused() -> None:
    policy = gate(egress(ask=("docs.test",)), "WebFetch")
    with pytest.raises(ForwardingRefused, match="no domain is allowed"):
        check_request(policy, body(tools=[FETCH]), None)
    policy = gate(egress(("docs.test",)), "WebFetch")
    with pytest.raises(ForwardingRefused, match="blocked_domains alone"):
        check_request(policy, body(tools=[{**FETCH, "blocked_domains": ["evil.test"]}]), None)


def test_an_agent_filter_narrows_the_api_domains() -> None:
    base = egress(("a.test", "b.test"))
    narrowed = agent_rules(base, "a", "a.md", {"network": {"allowedDomains": ["a.test"]}})
    assert narrowed is not None
    assert RuleSetEgress(narrowed).domains() == ("a.test",)


def test_mcp_servers_need_their_rule_and_an_egress_allowed_url() -> None:
    policy = gate(egress(("docs.test",), ask=("asked.test",)), "mcp__docs")
    assert check_request(policy, body(mcp_servers=[MCP]), None).decisions[0].allowed
    for url in (
        "https://evil.test/mcp",
        "https://asked.test/mcp",
        "https://127.0.0.1/mcp",
        "ftp://docs.test/x",
        "https://evil.docs.test/mcp",
    ):
        with pytest.raises(ForwardingRefused):
            check_request(policy, body(mcp_servers=[{**MCP, "url": url}]), None)
    with pytest.raises(ForwardingRefused, match="mcp__docs"):
        check_request(gate(egress(("docs.test",))), body(mcp_servers=[MCP]), None)


def test_url_sources_need_whole_tool_webfetch_and_an_egress_allowed_host() -> None:
    policy = gate(egress(("docs.test",)), "WebFetch")
    check_request(policy, body(**url_image("https://docs.test/a.png")), None)
    with pytest.raises(ForwardingRefused, match=r"evil\.test"):
        check_request(policy, body(**url_image("https://evil.test/a.png")), None)


def test_code_execution_needs_its_rule_and_egress() -> None:
    tool = {"type": "code_execution_20250825", "name": "c"}
    check_request(gate(egress(("docs.test",)), "CodeExecution"), body(tools=[tool]), None)
    with pytest.raises(ForwardingRefused, match="CodeExecution"):
        check_request(gate(egress(("docs.test",)), "WebFetch"), body(tools=[tool]), None)


def test_client_tools_are_a_closed_list_of_shapes() -> None:
    policy = gate(None)
    client = [
        {"name": "Bash", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "X", "input_schema": {"type": "object"}},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "bash_20250124", "name": "bash"},
    ]
    assert check_request(policy, body(tools=client), None).body["tools"] == client
    for tool in (
        {"name": "NoSchema"},
        {"type": "custom", "name": "NoSchema"},
        {"type": 7, "name": "n"},
        {"type": "computer_20991231", "name": "c"},
    ):
        with pytest.raises(ForwardingRefused):
            check_request(policy, body(tools=[tool]), None)


def test_an_effort_level_passes_and_other_output_config_needs_a_rule() -> None:
    """An agent's `effort` reaches the API as Claude Code sends it (`output_config:
    {effort}`); anything else in `output_config` is refused without a rule."""
    policy = gate(None)
    sent = check_request(policy, body(output_config={"effort": "low"}), None)
    assert sent.body["output_config"] == {"effort": "low"}
    refused: list[JSONObject] = [
        {"effort": "enormous"},
        {"effort": "low", "format": {}},
        {"task_budget": {}},
    ]
    for config in refused:
        with pytest.raises(ForwardingRefused, match="output_config"):
            check_request(policy, body(output_config=config), None)
    allowed = gate(None, "RequestField(output_config)")
    assert check_request(allowed, body(output_config={"format": {}}), None).body
