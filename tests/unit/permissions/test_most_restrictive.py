"""The most restrictive answer wins, as in Claude Code: an ask is never lost to an
allow of any scope (WebFetch included, where the broker cannot ask and refuses);
deny and ask path rules match in either case; a deny of `rm` holds behind `sudo`;
NotebookEdit is an edit under Edit rules in every mode."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.broker.forwarding_policy import ForwardingPolicy
from orchestrator.commands._explain import server_tool
from orchestrator.permissions import ToolCall, evaluate, parse_rule
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.sources import PolicySource, merge


def policy(mode: str = "default", **levels: dict[str, list[str]]) -> EffectivePolicy:
    """Sources highest first, as `load_policy` orders them (managed, then lower)."""
    sources = []
    for name, rules in levels.items():
        behavior_rules = []
        for spec in rules.get("allow", []):
            behavior_rules.append(parse_rule(spec, "allow", name, name))
        for spec in rules.get("ask", []):
            behavior_rules.append(parse_rule(spec, "ask", name, name))
        for spec in rules.get("deny", []):
            behavior_rules.append(parse_rule(spec, "deny", name, name))
        sources.append(PolicySource(name, behavior_rules))
    return merge(sources).with_mode(mode, "test")  # type: ignore[arg-type]


def fetch(pol: EffectivePolicy, url: str) -> str:
    return server_tool(pol, "WebFetch", {"url": url}).decision.behavior


@pytest.mark.parametrize(
    "levels",
    [
        {"project": {"allow": ["WebFetch"], "ask": ["WebFetch(domain:example.com)"]}},
        {"managed": {"ask": ["WebFetch(domain:example.com)"]}, "project": {"allow": ["WebFetch"]}},
        {"user": {"allow": ["WebFetch(domain:example.com)"],
                  "ask": ["WebFetch(domain:example.com)"]}},
    ],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["default", "bypassPermissions"])
def test_a_webfetch_ask_is_never_lost_to_an_allow(levels: Any, mode: str) -> None:
    pol = policy(mode, **levels)
    assert fetch(pol, "https://example.com/a") == "deny"  # the broker cannot ask: refused
    assert fetch(pol, "https://docs.example.com/a") == "deny"


def test_web_fetch_without_named_domains_cannot_pass_an_asked_domain() -> None:
    """A tool definition with no domains is narrowed to the allowed domains; an ask
    inside one of them cannot be cut out (the API takes allowed or blocked domains,
    not both), so the tool is refused rather than fetch it unasked."""
    rules = [
        parse_rule("WebFetch(domain:example.com)", "allow", "u", "u"),
        parse_rule("WebFetch(domain:docs.example.com)", "ask", "m", "m"),
    ]
    decided, allowed, _ = ForwardingPolicy.from_rules(rules).may_forward_domains(
        "WebFetch", None, {}
    )
    assert not decided.allowed and allowed is None
    rules[1] = parse_rule("WebFetch(domain:example.com)", "ask", "m", "m")
    decided, _, _ = ForwardingPolicy.from_rules(rules).may_forward_domains("WebFetch", None, {})
    assert not decided.allowed


def test_a_managed_ask_under_a_project_allow_asks() -> None:
    pol = policy(managed={"ask": ["Bash(touch:*)", "Read(./README.md)"]},
                 project={"allow": ["Bash(touch:*)", "Bash", "Read"]})  # fmt: skip
    bash = ToolCall(tool_name="Bash", tool_input={"command": "touch x"})
    read = ToolCall(tool_name="Read", tool_input={"file_path": "/workspace/README.md"})
    assert evaluate(pol, bash).decision.behavior == "ask"
    assert evaluate(pol, read).decision.behavior == "ask"


@pytest.mark.parametrize(
    ("rule", "path"),
    [("**/*.PEM", "key.pem"), ("./readme.md", "README.md"), ("./Docs/**", "docs/a"),
     ("SRC/**", "src/app.py")],
)  # fmt: skip
@pytest.mark.parametrize("behavior", ["deny", "ask"])
def test_deny_and_ask_path_rules_match_in_either_case(rule: str, path: str, behavior: str) -> None:
    pol = policy(project={behavior: [f"Read({rule})"]})
    read = ToolCall(tool_name="Read", tool_input={"file_path": f"/workspace/{path}"})
    assert evaluate(pol, read).decision.behavior == behavior
    cat = ToolCall(tool_name="Bash", tool_input={"command": f"cat {path}"})
    pol_cat = policy(project={behavior: [f"Read({rule})"], "allow": ["Bash(cat:*)"]})
    assert evaluate(pol_cat, cat).decision.behavior == behavior


def test_an_allow_path_rule_matches_only_its_own_case() -> None:
    pol = policy("default", project={"allow": ["Edit(./src/**)"]})
    write = ToolCall(tool_name="Write", tool_input={"file_path": "/workspace/SRC/x", "content": ""})
    assert evaluate(pol, write).decision.behavior == "ask"


@pytest.mark.parametrize(
    "command", ["sudo rm -f x", "sudo -u root rm -f x", "/usr/bin/sudo /bin/rm x", "doas rm x"]
)
@pytest.mark.parametrize("mode", ["default", "bypassPermissions"])
def test_a_deny_of_rm_holds_behind_sudo(command: str, mode: str) -> None:
    pol = policy(mode, project={"deny": ["Bash(rm:*)"], "allow": ["Bash"]})
    call = ToolCall(tool_name="Bash", tool_input={"command": command})
    assert evaluate(pol, call).decision.behavior == "deny"


def test_notebook_edit_in_bypass_permissions_is_denied_by_an_edit_deny() -> None:
    pol = policy("bypassPermissions", project={"deny": ["Edit(./nb/**)"]})
    call = ToolCall(
        tool_name="NotebookEdit",
        tool_input={"notebook_path": "/workspace/nb/a.ipynb", "new_source": "x"},
    )
    assert evaluate(pol, call).decision.behavior == "deny"
