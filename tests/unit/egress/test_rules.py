"""Egress rules: host patterns match as documented, deny wins, agents only narrow,
and rules come from settings, the CLI and WebFetch(domain:) permission rules."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.egress.resolver import Resolver
from orchestrator.egress.rules import HostError, RuleSet, match, normal_host, parse_rule
from orchestrator.egress.sources import agent_rules, load_rules
from orchestrator.egress.verdict import Answer, ConnectionPolicy
from orchestrator.errors import PolicyError
from orchestrator.permissions import load_policy


def rules(*specs: tuple[str, str]) -> RuleSet:
    return RuleSet(tuple(parse_rule(text, behavior, "test", "test") for text, behavior in specs))  # type: ignore[arg-type]


def test_exact_host_matches_only_itself() -> None:
    r = parse_rule("pypi.org", "allow", "t", "t")
    assert r.matches("pypi.org", 443)
    assert not r.matches("evil-pypi.org", 443)
    assert not r.matches("files.pypi.org", 443)
    assert not r.matches("pypi.org.evil.com", 443)


def test_wildcard_matches_subdomains_not_the_apex() -> None:
    r = parse_rule("*.example.com", "allow", "t", "t")
    assert r.matches("a.example.com", 443)
    assert r.matches("a.b.example.com", 80)
    assert not r.matches("example.com", 443)
    assert not r.matches("badexample.com", 443)


def test_port_suffix_narrows_a_rule() -> None:
    r = parse_rule("registry.example.com:443", "allow", "t", "t")
    assert r.matches("registry.example.com", 443)
    assert not r.matches("registry.example.com", 22)


def test_cidr_rule_names_addresses() -> None:
    r = parse_rule("10.1.0.0/16", "allow", "t", "t")
    assert r.matches("10.1.2.3", 80)
    assert not r.matches("10.2.0.1", 80)


@pytest.mark.parametrize(
    "bad", ["", "exa*mple.com", "*.", "a..b", "ex ample.com", "pypi.org:99999"]
)
def test_malformed_patterns_are_policy_errors(bad: str) -> None:
    with pytest.raises(PolicyError):
        parse_rule(bad, "allow", "t", "where")


@pytest.mark.parametrize("bad", ["", "a" * 300, "exämple.com", "a..b", "-a.com", "a b"])
def test_hosts_a_container_sends_must_be_dns_names(bad: str) -> None:
    with pytest.raises(HostError):
        normal_host(bad)


def test_hosts_are_compared_lower_case_without_trailing_dot() -> None:
    assert normal_host("PyPI.org.") == "pypi.org"


def test_deny_wins_over_allow_whatever_the_order() -> None:
    rs = rules(("*.example.com", "allow"), ("bad.example.com", "deny"))
    assert match(rs, "bad.example.com", 443).behavior == "deny"
    assert match(rs, "good.example.com", 443).behavior == "allow"
    assert match(rs, "other.org", 443).behavior is None


def test_ask_rule_beats_allow() -> None:
    rs = rules(("*.example.com", "allow"), ("new.example.com", "ask"))
    assert match(rs, "new.example.com", 443).behavior == "ask"


def test_agent_network_narrows_never_widens() -> None:
    base = rules(("pypi.org", "allow"), ("files.pythonhosted.org", "allow"))
    narrowed = agent_rules(
        base, "pip-only", "agents/pip.md",
        {"network": {"allowedDomains": ["pypi.org", "evil.com"], "deniedDomains": ["x.org"]}},
    )  # fmt: skip
    assert narrowed is not None
    assert match(narrowed, "pypi.org", 443).behavior == "allow"
    out = match(narrowed, "files.pythonhosted.org", 443)
    assert out.behavior == "deny" and out.narrowed_by and "pip-only" in out.narrowed_by
    # listed by the agent but not by the run: still no rule allows it
    assert match(narrowed, "evil.com", 443).behavior is None
    assert match(narrowed, "x.org", 443).behavior == "deny"


async def test_an_agents_narrowing_holds_for_an_address_the_run_allows() -> None:
    base = rules(("10.1.2.3", "allow"), ("pypi.org", "allow"))
    narrowed = agent_rules(
        base, "pip-only", "agents/pip.md", {"network": {"allowedDomains": ["pypi.org"]}}
    )
    assert narrowed is not None

    async def never_asked(host: str, port: int, why: str) -> Answer:
        raise AssertionError("asked")

    connections = ConnectionPolicy(narrowed, "bypassPermissions", Resolver(), never_asked)
    verdict = await connections.verdict_for("10.1.2.3", 443)
    assert verdict.behavior == "deny" and "pip-only" in verdict.reason
    assert (
        await ConnectionPolicy(base, "default", Resolver(), never_asked).verdict_for(
            "10.1.2.3", 443
        )
    ).behavior == "allow"


def test_agent_network_none_takes_egress_away() -> None:
    assert agent_rules(rules(("a.com", "allow")), "n", "f", {"network": "none"}) is None
    assert agent_rules(rules(("a.com", "allow")), "n", "f", {"network": False}) is None


def test_malformed_agent_network_names_the_file() -> None:
    with pytest.raises(PolicyError, match=r"agents/x\.md"):
        agent_rules(RuleSet(), "x", "agents/x.md", {"network": {"allowedDomains": "pypi.org"}})


def test_sources_settings_cli_and_webfetch(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".claude").mkdir(parents=True)
    (workspace / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "sandbox": {"network": {"allowedDomains": ["pypi.org"], "deniedDomains": ["bad.org"]}},
                "permissions": {"allow": ["WebFetch(domain:docs.example.com)"],
                                "deny": ["WebFetch(domain:evil.example.com)"]},
            }
        )
    )  # fmt: skip
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps({"sandbox": {"network": {"deniedDomains": ["pypi.org"]}}}))
    settings = Settings(config_dir=tmp_path / "cfg", state_dir=tmp_path / "state")
    policy = load_policy(settings, workspace)
    rs = load_rules(settings, workspace, policy, allow_domains=["cli.example"])
    assert match(rs, "pypi.org", 443).behavior == "allow"
    assert match(rs, "bad.org", 443).behavior == "deny"
    assert match(rs, "docs.example.com", 443).behavior == "allow"
    assert match(rs, "evil.example.com", 443).behavior == "deny"
    allowed = match(rs, "cli.example", 443)
    assert allowed.rule is not None and allowed.rule.source == "cli:--allow-domain"
    managed_settings = Settings(
        config_dir=tmp_path / "cfg", state_dir=tmp_path / "state", managed_policy=managed
    )
    rs = load_rules(managed_settings, workspace, policy)
    denied = match(rs, "pypi.org", 443)
    assert denied.behavior == "deny" and denied.rule and denied.rule.source.startswith("managed:")


def test_bad_settings_entry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps({"sandbox": {"network": {"allowedDomains": ["exa*mple.com"]}}})
    )
    settings = Settings(config_dir=tmp_path / "cfg", state_dir=tmp_path / "state")
    with pytest.raises(PolicyError, match=r"settings.json: sandbox.network: allowedDomains\[0\]"):
        load_rules(settings, tmp_path, load_policy(settings, tmp_path))


@dataclass
class _Task:
    task_id: str
    parent_id: str | None
    run_id: str = "run_t"
    trace_id: str = ""
    description: str = "t"
    agent_type: str = "general-purpose"


@dataclass
class _Agent:
    extra: dict[str, object]
    source: str = "agents/x.md"

    @property
    def network(self) -> object:
        return self.extra.get("network")


async def test_a_nested_task_never_reaches_more_than_its_parent(tmp_path: Path) -> None:
    """Delegating cannot widen egress: a nested task starts from its parent's rules
    (narrowed by its own agent file), and a parent without egress has none to give."""
    from orchestrator.egress.resolver import StaticResolver
    from orchestrator.egress.service import EgressService, TaskEgress

    svc = EgressService(
        rules=rules(("a.test", "allow"), ("b.test", "allow")),
        mode="dontAsk",
        resolver=StaticResolver({"a.test": "127.0.0.1", "b.test": "127.0.0.1"}),
    )
    opened: list[TaskEgress | None] = []
    cases: list[tuple[str, str | None, dict[str, object]]] = [
        ("sa_parent", None, {"network": {"allowedDomains": ["a.test"]}}),
        ("sa_child", "sa_parent", {}),
        ("sa_sibling", None, {}),
        ("sa_off", None, {"network": "none"}),
        ("sa_off_child", "sa_off", {}),
    ]
    for name, parent_id, extra in cases:
        (tmp_path / name).mkdir()
        opened.append(await svc.open(_Task(name, parent_id), _Agent(extra), tmp_path / name))
    parent, child, sibling, off, off_child = opened
    try:
        assert parent is not None and child is not None and sibling is not None
        assert off is None and off_child is None
        assert (await child.connections.verdict_for("a.test", 443)).behavior == "allow"
        refused = await child.connections.verdict_for("b.test", 443)
        assert refused.behavior == "deny" and "agent general-purpose" in refused.reason
        assert (await sibling.connections.verdict_for("b.test", 443)).behavior == "allow"
    finally:
        for egress in (parent, child, sibling):
            if egress is not None:
                await egress.close()


def test_a_raw_tcp_rule_names_one_port() -> None:
    from orchestrator.egress.rules import RuleSet

    rule = parse_rule("tcp://db.example.com:5432", "allow", "test", "test")
    assert (rule.host, rule.port, rule.raw) == ("db.example.com", 5432, True)
    rules = RuleSet((rule, parse_rule("db.example.com", "allow", "test", "test")))
    assert rules.raw_tcp("db.example.com", 5432) is rule
    assert rules.raw_tcp("db.example.com", 443) is None
    with pytest.raises(PolicyError, match="names one port"):
        parse_rule("tcp://db.example.com", "allow", "test", "test")
