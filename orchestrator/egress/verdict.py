"""One egress decision: may this task reach host:port, and at which address?

Order: the host must be a host name (IP literals only when an address rule names
them); deny rules and an agent's narrowing refuse; ask rules, and destinations no
rule names, follow the permission mode (`default`, `acceptEdits`: ask the run's
approver; `dontAsk`, `plan`: deny; `bypassPermissions`: allow); allow rules allow.
Only an allowed name is resolved (a denied name never reaches DNS), and every
address it resolves to must pass the resolver's refusals unless an address rule
names it. A decision is a value (`Verdict`), with a one-line reason that says
which rule or mode decided and what to do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from orchestrator.behavior import Behavior, FinalBehavior
from orchestrator.egress.addresses import IPAddress, parse_ip
from orchestrator.egress.resolver import ResolveError, Resolver
from orchestrator.egress.rules import MANAGED_ONLY, HostError, RuleSet, match, normal_host

TOOL_NAME = "Network"
"""`tool_name` of egress decisions in the audit and in approval questions."""

ASK_MODES = frozenset({"default", "acceptEdits"})
DENY_MODES = frozenset({"dontAsk", "plan"})


@dataclass(frozen=True)
class Answer:
    """What the approver said about one destination."""

    behavior: FinalBehavior
    decided_by: str
    reason: str = ""
    channel: str = ""
    """The approval channel that answered (see `ApprovalAnswer.channel`)."""
    person: str = ""
    """Who answered there."""


AskConnection = Callable[[str, int, str], Awaitable[Answer]]
"""Puts (host, port, why it asks) to the run's approver (through its `Asker`)."""


@dataclass(frozen=True)
class Verdict:
    """The decision on one connection."""

    behavior: FinalBehavior
    host: str
    port: int
    reason: str
    """One line: which rule or mode decided, and for a refusal what to do."""
    decided_by: str
    """`rule: PATTERN`, `mode: dontAsk`, `terminal:USER`, `address check`, …"""
    source: str = ""
    policy: Behavior = "deny"
    """What rules and mode said before any approver was asked."""
    addresses: tuple[IPAddress, ...] = field(default=())
    """Where to connect (allowed only): the addresses that were checked."""
    raw: bool = False
    """A `tcp://HOST:PORT` rule names this destination: a tunnel needs no TLS."""
    channel: str = ""
    """When a person was asked: the approval channel that answered."""
    person: str = ""
    """... and who answered there."""


def _fix(host: str) -> str:
    return (
        f'to allow it, add `--allow-domain {host}` or "{host}" to '
        "sandbox.network.allowedDomains in .claude/settings.json"
    )


class ConnectionPolicy:
    """The verdict on every connection of one task (its rules, the mode, its asker)."""

    def __init__(self, rules: RuleSet, mode: str, resolver: Resolver, ask: AskConnection) -> None:
        self.rules = rules
        self.mode = mode
        self.resolver = resolver
        self.ask = ask

    async def verdict_for(self, raw_host: str, port: int) -> Verdict:
        try:
            host = normal_host(raw_host)
        except HostError as exc:
            return Verdict("deny", raw_host[:80], port, f"{exc}; ask for a DNS name", "proxy")
        if not 0 < port < 65536:
            return Verdict("deny", host, port, f"port {port} is not a TCP port", "proxy")
        literal = parse_ip(host)
        if literal is not None:
            return self._literal(host, literal, port)
        found = match(self.rules, host, port)
        if found.behavior == "deny":
            if found.rule is not None:
                return Verdict(
                    "deny", host, port,
                    f"{host} is denied by the rule {found.rule.text} from {found.rule.source}; "
                    "deny rules cannot be overridden",
                    f"rule: {found.rule.text}", found.rule.source,
                )  # fmt: skip
            fix = (
                "only your administrator can add it to the managed allowedDomains"
                if str(found.narrowed_by).startswith(MANAGED_ONLY)
                else "widen that agent file's network.allowedDomains"
            )
            return Verdict(
                "deny", host, port,
                f"{host} is outside the domains {found.narrowed_by} may reach; {fix}",
                f"agent: {found.narrowed_by}", str(found.narrowed_by),
            )  # fmt: skip
        if found.behavior == "allow" and found.rule is not None:
            verdict = Verdict(
                "allow", host, port, f"allowed by the rule {found.rule.text}",
                f"rule: {found.rule.text}", found.rule.source, policy="allow",
            )  # fmt: skip
        else:
            verdict = await self._by_mode(host, port, found.rule.text if found.rule else None)
            if verdict.behavior == "deny":
                return verdict
        return await self._resolved(verdict)

    async def _by_mode(self, host: str, port: int, ask_rule: str | None) -> Verdict:
        why = f"the rule {ask_rule} asks" if ask_rule else f"{host} is in no allowedDomains"
        if self.mode == "bypassPermissions" and ask_rule is None:
            return Verdict(
                "allow", host, port, f"{why}; mode bypassPermissions allows it",
                "mode: bypassPermissions", "mode", policy="allow",
            )  # fmt: skip
        if self.mode in DENY_MODES:
            return Verdict(
                "deny", host, port, f"{why} and mode {self.mode} denies it; {_fix(host)}",
                f"mode: {self.mode}", "mode", policy="deny",
            )  # fmt: skip
        answer = await self.ask(host, port, why)
        reason = answer.reason or (
            f"{why}; allowed by {answer.decided_by}"
            if answer.behavior == "allow"
            else f"{why}; denied by {answer.decided_by}; {_fix(host)}"
        )
        return Verdict(
            answer.behavior, host, port, reason, answer.decided_by,
            f"rule: {ask_rule}" if ask_rule else f"mode: {self.mode}", policy="ask",
            channel=answer.channel, person=answer.person,
        )  # fmt: skip

    def _literal(self, host: str, address: IPAddress, port: int) -> Verdict:
        rule = self.rules.address_allowed(address, port)
        if rule is None:
            return Verdict(
                "deny", host, port,
                f"{host} is an IP address; ask for the host by name, or allow the address "
                f"explicitly (`--allow-domain {host}`)",
                "proxy: IP literal", "proxy",
            )  # fmt: skip
        if who := self.rules.outside_filter(host, port):
            return Verdict(
                "deny", host, port, f"{host} is outside the domains {who} may reach",
                f"filter: {who}", who,
            )  # fmt: skip
        return Verdict(
            "allow", host, port, f"allowed by the address rule {rule.text}",
            f"rule: {rule.text}", rule.source, policy="allow", addresses=(address,),
            raw=self.rules.raw_tcp(host, port) is not None,
        )  # fmt: skip

    async def _resolved(self, verdict: Verdict) -> Verdict:
        host, port = verdict.host, verdict.port
        try:
            addresses = await self.resolver.resolve(host, port)
        except ResolveError as exc:
            return Verdict("deny", host, port, str(exc), "resolver", "proxy", verdict.policy)
        for address in addresses:
            why = self.resolver.refusal(address)
            if why and self.rules.address_allowed(address, port) is None:
                return Verdict(
                    "deny", host, port,
                    f"{host} resolves to {address}, {why}; a sandbox may not reach it unless "
                    f"a rule names the address (`--allow-domain {address}`)",
                    "proxy: address check", "proxy", verdict.policy,
                )  # fmt: skip
        return Verdict(
            "allow", host, port, verdict.reason, verdict.decided_by, verdict.source,
            verdict.policy, tuple(addresses), raw=self.rules.raw_tcp(host, port) is not None,
            channel=verdict.channel, person=verdict.person,
        )  # fmt: skip
