"""Where egress rules come from, with the permission sources' precedence.

Highest first: the managed settings (`WARDEN_MANAGED_POLICY`, then Claude Code's
`/etc/claude-code/managed-settings.json`), the CLI (`--allow-domain`,
`--deny-domain`), `--policy FILE`, the workspace's `.claude/settings.local.json`
and `.claude/settings.json`, the user's `~/.claude/settings.json`
(`CLAUDE_CONFIG_DIR`) and warden's `settings.json`: the same files, read the same
fail-closed way (`permissions.settings_files`), as the permission rules. Each
settings file may carry Claude Code's

    {"sandbox": {"network": {"allowedDomains": [...], "deniedDomains": [...]}}}

and every source's `WebFetch(domain:HOST)` permission rules (allow, ask or deny)
count as egress rules for HOST too. Deny rules of any source win, so nothing
below the managed policy can open what it denies.

As in Claude Code, managed `sandbox.network.allowManagedDomainsOnly: true` keeps
only the managed files' allowed domains (and managed `WebFetch(domain:…)` allow
rules): the CLI's, the policy file's, the workspace's and the user's allows are
dropped, their denies still hold, and a destination no managed rule allows is
refused in every mode (nobody below the administrator can open it). A workspace the person has not trusted
contributes its denies only. Both are said in `RuleSet.notes`.

An agent file's `network:` key narrows one agent (`agent_rules`): its
`allowedDomains` is a filter (the destination must also match it), its
`deniedDomains` add denies, and `network: none` (or `false`) takes egress away
from that agent entirely.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config import Settings
from orchestrator.egress.rules import MANAGED_ONLY, EgressRule, RuleSet, parse_rule
from orchestrator.errors import PolicyError
from orchestrator.permissions.settings_files import SettingsFile, SettingsStack, load_stack
from orchestrator.permissions.sources import (
    MAX_POLICY_BYTES,
    PolicyDocument,
    policy_document,
    read_document,
)

if TYPE_CHECKING:
    from orchestrator.permissions import EffectivePolicy

JSON = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]

NETWORK_KEYS = {"allowedDomains": "allow", "deniedDomains": "deny"}
"""Claude Code's `sandbox.network` keys warden reads, and what they mean."""
OTHER_NETWORK_KEYS = frozenset(
    {
        MANAGED_ONLY,
        "allowUnixSockets",
        "allowAllUnixSockets",
        "allowLocalBinding",
        "httpProxyPort",
        "socksProxyPort",
    }
)
"""Claude Code's other `sandbox.network` keys: about its own host sandbox (sockets,
proxy ports), with no meaning for warden's containers, which have no network
interface but `lo` and only warden's proxy."""
WEBFETCH_DOMAIN = "domain:"
CLI_ALLOW = "cli:--allow-domain"
CLI_DENY = "cli:--deny-domain"
PROJECT_KINDS = ("project", "project-local")


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


def _settings_network(doc: object, where: str) -> dict[str, JSON] | None:
    """A settings document's `sandbox.network` mapping, checked: a key that is neither
    Claude Code's nor close to one is refused only when it resembles one (a misspelt
    `deniedDomains` must not drop its denies in silence)."""
    if not isinstance(doc, dict):
        return None
    sandbox = doc.get("sandbox")
    if sandbox is None:
        return None
    if not isinstance(sandbox, dict):
        raise PolicyError(f"{where}: `sandbox` must be a mapping")
    network = sandbox.get("network")
    if network is None:
        return None
    if not isinstance(network, dict):
        raise PolicyError(
            f"{where}: sandbox.network must be a mapping with allowedDomains/deniedDomains"
        )
    known = [*NETWORK_KEYS, *sorted(OTHER_NETWORK_KEYS)]
    for key in network:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close or "domain" in key.lower():
            hint = f"did you mean {close[0]!r}" if close else f"warden knows {', '.join(known)}"
            raise PolicyError(
                f"{where}: sandbox.network key {key!r} is not one Claude Code knows ({hint}); "
                "fix its name so its domains are not lost"
            )
    flag = network.get(MANAGED_ONLY)
    if flag is not None and not isinstance(flag, bool):
        raise PolicyError(
            f"{where}: sandbox.network.{MANAGED_ONLY} is {flag!r}, not true or false; "
            f'write "{MANAGED_ONLY}": true (or remove it)'
        )
    return network


def settings_rules(path: Path, source: str, doc: Any = None) -> list[EgressRule]:
    """`sandbox.network` of one policy file (`--policy`; absent file: none). `doc`:
    its content as the run already read it (None: read now)."""
    if doc is None:
        if not path.is_file():
            return []
        doc = read_document(path)
    network = _settings_network(doc, str(path))
    return network_block(network, source, f"{path}: sandbox.network")


def _file_rules(f: SettingsFile) -> list[EgressRule]:
    network = _settings_network(f.doc, str(f.path))
    return network_block(network, f.source, f"{f.path}: sandbox.network")


def _managed_only(files: Sequence[SettingsFile]) -> str | None:
    """The managed file that sets `allowManagedDomainsOnly: true`, if any (the key
    means nothing in other files, as in Claude Code)."""
    for f in files:
        network = _settings_network(f.doc, str(f.path)) if f.managed else None
        if network is not None and network.get(MANAGED_ONLY) is True:
            return f.source
    return None


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


class _Collect:
    """Rules in precedence order, dropping allows that may not apply (and saying so)."""

    def __init__(self, managed_only: str | None) -> None:
        self.only_managed = f"{MANAGED_ONLY} in {managed_only}" if managed_only else None
        self.rules: list[EgressRule] = []
        self.notes: list[str] = []

    def add(self, rules: list[EgressRule], source: str, why: str | None) -> None:
        dropped = [r.text for r in rules if r.behavior == "allow"] if why else []
        if dropped:
            self.notes.append(f"{source}: allowed domains {', '.join(dropped)} not applied: {why}")
        self.rules += [r for r in rules if not why or r.behavior != "allow"]

    def managed_and_cli(
        self,
        files: Sequence[SettingsFile],
        allow_domains: Sequence[str],
        deny_domains: Sequence[str],
    ) -> None:
        for f in files:
            if f.managed:
                self.add(_file_rules(f), f.source, None)
        denied = [parse_rule(d, "deny", CLI_DENY, f"--deny-domain {d!r}") for d in deny_domains]
        self.add(denied, CLI_DENY, None)
        allowed = [
            parse_rule(d, "allow", CLI_ALLOW, f"--allow-domain {d!r}") for d in allow_domains
        ]
        self.add(allowed, "--allow-domain", self.only_managed)

    def ruleset(self) -> RuleSet:
        """The rules; under `allowManagedDomainsOnly` also a filter: a destination no
        managed allow rule names is refused (never asked, never allowed by a mode)."""
        only: tuple[tuple[str, tuple[EgressRule, ...]], ...] = ()
        if self.only_managed:
            managed = tuple(
                r for r in self.rules if r.behavior == "allow" and r.source.startswith("managed:")
            )
            only = ((self.only_managed, managed),)
        return RuleSet(rules=tuple(self.rules), only=only, notes=tuple(dict.fromkeys(self.notes)))


def load_rules(
    settings: Settings,
    workspace: Path,
    policy: EffectivePolicy,
    *,
    allow_domains: Sequence[str] = (),
    deny_domains: Sequence[str] = (),
    policy_file: str | PolicyDocument | None = None,
    trusted: bool = True,
    stack: SettingsStack | None = None,
) -> RuleSet:
    """Every egress rule of a run, highest source first (see the module doc).
    PolicyError when a settings file cannot be read completely or a rule is malformed.
    `stack`: the run's settings as read once (None reads them now); `policy_file`
    likewise (`PolicyDocument`), or a name or path read now."""
    stack = load_stack(settings, workspace, MAX_POLICY_BYTES) if stack is None else stack
    found = _Collect(_managed_only(stack.files))
    found.managed_and_cli(stack.files, allow_domains, deny_domains)
    if policy_file is not None:
        document = policy_document(settings, policy_file)
        source = f"policy:{document.path}"
        found.add(settings_rules(document.path, source, document.doc), source, found.only_managed)
    untrusted = "the workspace is not trusted (trust it with --trust-workspace)"
    for f in stack.files:
        if not f.managed:
            why = untrusted if not trusted and f.kind in PROJECT_KINDS else found.only_managed
            found.add(_file_rules(f), f.source, why)
    for rule in webfetch_rules(policy):
        managed_rule = rule.source.startswith("managed:")
        found.add([rule], rule.source, None if managed_rule else found.only_managed)
    return found.ruleset()


def exec_rules(
    settings: Settings, allow_domains: Sequence[str], deny_domains: Sequence[str]
) -> RuleSet:
    """`warden exec`'s egress rules: the managed settings' and the command line's
    (a one-off command reads no workspace settings), `allowManagedDomainsOnly` honoured."""
    stack = load_stack(settings, None, MAX_POLICY_BYTES)
    found = _Collect(_managed_only(stack.files))
    found.managed_and_cli(stack.files, allow_domains, deny_domains)
    return found.ruleset()


def agent_rules(
    base: RuleSet, name: str, source: str, extra: Mapping[str, object]
) -> RuleSet | None:
    """`base` narrowed by an agent file's `warden.network` (`extra["network"]`; absent
    or None: not set); None: no egress for it.
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
