"""Locks in where egress rules come from: the same settings files as the permission
rules (Claude Code's managed file, `WARDEN_MANAGED_POLICY`, `~/.claude/settings.json`
under `CLAUDE_CONFIG_DIR`, the workspace's, warden's own), read fail-closed; managed
`allowManagedDomainsOnly` keeps only the managed allowed domains (denies of every
source still hold, a destination no managed rule allows is refused); an untrusted
workspace contributes its denies only; a misspelt domain key is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.egress.rules import RuleSet, match
from orchestrator.egress.sources import exec_rules, load_rules
from orchestrator.errors import PolicyError
from orchestrator.permissions import load_policy


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def network(allowed: list[str] | None = None, denied: list[str] | None = None,
            **more: Any) -> dict[str, Any]:  # fmt: skip
    block: dict[str, Any] = dict(more)
    if allowed is not None:
        block["allowedDomains"] = allowed
    if denied is not None:
        block["deniedDomains"] = denied
    return {"sandbox": {"network": block}}


@pytest.fixture
def s(tmp_path: Path) -> Settings:
    return Settings(
        state_dir=tmp_path / "state",
        config_dir=tmp_path / "config",
        claude_dir=tmp_path / "home/.claude",
        claude_managed_settings=tmp_path / "etc/claude-code/managed-settings.json",
    )


def rules(s: Settings, ws: Path, *, trusted: bool = True, **kw: Any) -> RuleSet:
    return load_rules(s, ws, load_policy(s, ws, trusted=trusted), trusted=trusted, **kw)


def behavior(rs: RuleSet, host: str) -> str | None:
    return match(rs, host, 443).behavior


def test_claude_codes_user_and_managed_files_carry_domain_rules(
    s: Settings, workspace: Path
) -> None:
    write(s.claude_dir / "settings.json", network(["pypi.org"], ["evil.example"]))
    write(s.claude_managed_settings, network(denied=["pypi.org"]))
    write(s.config_dir / "settings.json", network(["files.example"]))
    rs = rules(s, workspace)
    assert behavior(rs, "evil.example") == "deny"
    assert behavior(rs, "pypi.org") == "deny"  # the managed deny wins over the user's allow
    found = match(rs, "pypi.org", 443)
    assert found.rule is not None and found.rule.source.startswith("managed:")
    assert behavior(rs, "files.example") == "allow"


def test_a_user_settings_path_that_is_a_directory_refuses(s: Settings, workspace: Path) -> None:
    write(s.claude_dir / "settings.json", network(denied=["evil.example"]))
    policy = load_policy(s, workspace)
    (s.claude_dir / "settings.json").unlink()
    (s.claude_dir / "settings.json").mkdir()
    with pytest.raises(PolicyError, match=r"settings\.json: .*directory"):
        load_rules(s, workspace, policy)


def test_allow_managed_domains_only_keeps_the_managed_allows(s: Settings, workspace: Path) -> None:
    managed = network(["pypi.org"], allowManagedDomainsOnly=True)
    managed["permissions"] = {"allow": ["WebFetch(domain:docs.example)"]}
    write(s.claude_managed_settings, managed)
    write(s.claude_dir / "settings.json", network(["user.example"], ["evil.example"]))
    project = network(["project.example"])
    project["permissions"] = {"allow": ["WebFetch(domain:fetch.example)"]}
    write(workspace / ".claude/settings.json", project)
    rs = rules(s, workspace, allow_domains=["cli.example"])
    assert behavior(rs, "pypi.org") == "allow"
    assert behavior(rs, "docs.example") == "allow"  # a managed WebFetch allow rule
    for host in ("user.example", "project.example", "fetch.example", "cli.example", "other.org"):
        found = match(rs, host, 443)
        assert found.behavior == "deny", host
        assert str(found.narrowed_by).startswith("allowManagedDomainsOnly")
    assert behavior(rs, "evil.example") == "deny"  # the user's deny still holds
    assert any("user.example" in n and "allowManagedDomainsOnly" in n for n in rs.notes)
    assert any("cli.example" in n for n in rs.notes)


def test_allow_managed_domains_only_outside_managed_settings_means_nothing(
    s: Settings, workspace: Path
) -> None:
    write(s.claude_dir / "settings.json", network(["user.example"], allowManagedDomainsOnly=True))
    rs = rules(s, workspace)
    assert behavior(rs, "user.example") == "allow"
    assert behavior(rs, "other.org") is None  # the mode decides, as without the key


def test_a_managed_only_flag_of_the_wrong_type_is_refused(s: Settings, workspace: Path) -> None:
    write(s.claude_managed_settings, network(["pypi.org"], allowManagedDomainsOnly="yes"))
    with pytest.raises(PolicyError, match="allowManagedDomainsOnly is 'yes', not true or false"):
        rules(s, workspace)


def test_an_untrusted_workspace_only_denies(s: Settings, workspace: Path) -> None:
    write(workspace / ".claude/settings.local.json", network(["local.example"], ["evil.example"]))
    untrusted = rules(s, workspace, trusted=False)
    assert behavior(untrusted, "local.example") is None
    assert behavior(untrusted, "evil.example") == "deny"
    assert any("not trusted" in n for n in untrusted.notes)
    assert behavior(rules(s, workspace), "local.example") == "allow"


@pytest.mark.parametrize("key", ["deniedDomain", "denied_domains", "blockedDomains"])
def test_a_misspelt_domain_key_is_refused(s: Settings, workspace: Path, key: str) -> None:
    write(workspace / ".claude/settings.json", {"sandbox": {"network": {key: ["evil.example"]}}})
    with pytest.raises(PolicyError, match=f"sandbox.network key '{key}'"):
        rules(s, workspace)


def test_claude_codes_other_network_keys_are_accepted(s: Settings, workspace: Path) -> None:
    other = network(["pypi.org"], allowLocalBinding=True, httpProxyPort=3128, allowUnixSockets=[])
    write(workspace / ".claude/settings.json", other)
    assert behavior(rules(s, workspace), "pypi.org") == "allow"


def test_warden_exec_honours_managed_domains_only(s: Settings) -> None:
    write(s.claude_managed_settings, network(["pypi.org"], allowManagedDomainsOnly=True))
    rs = exec_rules(s, ["cli.example"], ["bad.example"])
    assert behavior(rs, "pypi.org") == "allow"
    assert behavior(rs, "cli.example") == "deny"
    assert behavior(rs, "bad.example") == "deny"
    assert behavior(exec_rules(replace(s, claude_managed_settings=s.state_dir / "x"),
                               ["cli.example"], []), "cli.example") == "allow"  # fmt: skip
