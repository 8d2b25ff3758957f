"""Where egress rules come from, with the permission sources' precedence.

Highest first: the managed policy (`WARDEN_MANAGED_POLICY`), the CLI
(`--allow-domain`, `--deny-domain`), `--policy FILE`, the workspace's
`.claude/settings.local.json` and `.claude/settings.json`, the user's
`settings.json`. Each settings file may carry Claude Code's

    {"sandbox": {"network": {"allowedDomains": [...], "deniedDomains": [...]}}}

and every source's `WebFetch(domain:HOST)` permission rules (allow, ask or deny)
count as egress rules for HOST too. Deny rules of any source win, so nothing
below the managed policy can open what it denies. An agent file's `network:` key
narrows one agent (`agent_rules`): its `allowedDomains` is a filter (the
destination must also match it), its `deniedDomains` add denies, and
`network: none` (or `false`) takes egress away from that agent entirely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import Settings
from orchestrator.egress.rules import EgressRule, RuleSet, parse_rule
from orchestrator.errors import PolicyError
from orchestrator.permissions.sources import find_policy, read_document

if TYPE_CHECKING:
    from orchestrator.permissions import EffectivePolicy

JSON = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]

NETWORK_KEYS = {"allowedDomains": "allow", "deniedDomains": "deny"}
"""Claude Code's `sandbox.network` keys warden reads, and what they mean."""
WEBFETCH_DOMAIN = "domain:"
CLI_ALLOW = "cli:--allow-domain"
CLI_DENY = "cli:--deny-domain"


def network_block(block: JSON, source: str, where: str) -> list[EgressRule]:
    """The rules of one `network` mapping (`allowedDomains`, `deniedDomains`)."""
    if block is None:
        return []
    if not isinstance(block, dict):
        raise PolicyError(f"{where}: `network` must be a mapping with allowedDomains/deniedDomains")
    rules: list[EgressRule] = []
    for key, behavior in NETWORK_KEYS.items():
        items = block.get(key) or []
        if not isinstance(items, list):
            raise PolicyError(f"{where}: `{key}` must be a list of domains, got {items!r}")
        for i, text in enumerate(items):
            rules.append(parse_rule(text, behavior, source, f"{where}: {key}[{i}]"))  # type: ignore[arg-type]
    return rules


def settings_rules(path: Path, source: str) -> list[EgressRule]:
    """`sandbox.network` of one settings or policy file (absent file: none)."""
    if not path.is_file():
        return []
    doc = read_document(path)
    if not isinstance(doc, dict):
        return []
    sandbox = doc.get("sandbox")
    if sandbox is None:
        return []
    if not isinstance(sandbox, dict):
        raise PolicyError(f"{path}: `sandbox` must be a mapping")
    return network_block(sandbox.get("network"), source, f"{path}: sandbox.network")


def webfetch_rules(policy: EffectivePolicy) -> list[EgressRule]:
    """`WebFetch(domain:HOST)` permission rules as egress rules for HOST."""
    found: list[EgressRule] = []
    for rule in policy.rules:
        spec = (rule.specifier or "").strip()
        if rule.tool == "WebFetch" and spec.startswith(WEBFETCH_DOMAIN):
            host = spec[len(WEBFETCH_DOMAIN) :].strip()
            found.append(
                parse_rule(host, rule.behavior, rule.source, f"{rule.source}: {rule.text}")
            )
    return found


def load_rules(
    settings: Settings,
    workspace: Path,
    policy: EffectivePolicy,
    *,
    allow_domains: Sequence[str] = (),
    deny_domains: Sequence[str] = (),
    policy_file: str | None = None,
) -> RuleSet:
    """Every egress rule of a run, highest source first."""
    rules: list[EgressRule] = []
    if settings.managed_policy is not None and settings.managed_policy.is_file():
        rules += settings_rules(settings.managed_policy, f"managed:{settings.managed_policy}")
    rules += [parse_rule(d, "deny", CLI_DENY, f"--deny-domain {d!r}") for d in deny_domains]
    rules += [parse_rule(d, "allow", CLI_ALLOW, f"--allow-domain {d!r}") for d in allow_domains]
    if policy_file is not None:
        path = find_policy(settings, policy_file)
        rules += settings_rules(path, f"policy:{path}")
    claude = workspace / ".claude"
    for filename, kind in (("settings.local.json", "project-local"), ("settings.json", "project")):
        rules += settings_rules(claude / filename, f"{kind}:{claude / filename}")
    user = settings.config_dir / "settings.json"
    rules += settings_rules(user, f"user:{user}")
    rules += webfetch_rules(policy)
    return RuleSet(rules=tuple(rules))


def agent_rules(
    base: RuleSet, name: str, source: str, extra: Mapping[str, object]
) -> RuleSet | None:
    """`base` narrowed by an agent file's `network:` key; None: no egress for it.
    PolicyError names the file when the key is malformed."""
    block = extra.get("network")
    if block is None:
        return base
    if block is False or (isinstance(block, str) and block.strip().lower() in ("none", "off")):
        return None
    who = f"agent {name} ({source})"
    if isinstance(block, dict) and block.get("allowedDomains") == []:
        return None  # `allowedDomains: []` means no domain at all
    rules = network_block(block, who, f"{source}: network")  # type: ignore[arg-type]
    allowed = [r for r in rules if r.behavior == "allow"]
    denied = [r for r in rules if r.behavior == "deny"]
    return base.narrowed(who, allowed, denied)
