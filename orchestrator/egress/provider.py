"""One subagent's egress rules as the model provider's destinations
(`broker.provider_egress.ProviderEgress`): what a server tool, an MCP connector or a
URL source may make Anthropic's servers reach for it.

The proxy's rules, read strictly (see `broker.provider_egress`): allow rules only
(an ask rule or an unnamed host is refused in every mode), deny rules and agent
filters as the proxy reads them, no raw-TCP rule (`tcp://`), and no IP literal
unless an address rule names it. An API domain (`allowed_domains` entry) also covers
its subdomains, so it passes only when the domain itself is allowed and no deny rule
names the domain or anything under it.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.broker.provider_egress import NO_EGRESS, ProviderEgress, Reach, url_host_port
from orchestrator.egress.addresses import parse_ip
from orchestrator.egress.rules import EgressRule, HostError, RuleSet, match, normal_host

HTTPS_PORT = 443
"""The port a domain (no URL) is checked on: the provider fetches over HTTPS."""


def _fix(host: str) -> str:
    return f"allow it with `--allow-domain {host}` or sandbox.network.allowedDomains"


@dataclass(frozen=True)
class RuleSetEgress:
    """`ProviderEgress` over one subagent's egress `RuleSet`."""

    rules: RuleSet
    enabled: bool = True

    def domain(self, domain: str) -> Reach:
        text = domain.strip().lower().split("/", 1)[0].removeprefix("*.")
        try:
            host = normal_host(text)
        except HostError as exc:
            return Reach(False, f"{domain[:80]!r}: {exc}", "egress: not a host")
        reach = self._host(host, HTTPS_PORT)
        if not reach.allowed:
            return reach
        under = next(
            (
                r
                for r in self.rules.rules
                if r.behavior == "deny" and r.network is None and _under(r, host)
            ),
            None,
        )
        if under is not None:
            return Reach(
                False,
                f"{host} covers its subdomains in the model API, and the rule {under.text} "
                f"({under.source}) denies {under.text}; name the allowed subdomains instead",
                f"egress rule: {under.text}",
            )
        return reach

    def url(self, url: str) -> Reach:
        found = url_host_port(url)
        if found is None:
            return Reach(
                False, f"{url[:200]!r} is not an http(s) URL with a host", "egress: not a URL"
            )
        try:
            host = normal_host(found[0])
        except HostError as exc:
            return Reach(False, str(exc), "egress: not a host")
        return self._host(host, found[1])

    def domains(self) -> tuple[str, ...]:
        candidates = [r for r in self.rules.rules if r.behavior == "allow"]
        for _, filtered in self.rules.only:
            candidates.extend(filtered)
        found = []
        for rule in candidates:
            if rule.wildcard or rule.network is not None or rule.raw or not rule.host:
                continue
            if rule.host not in found and self.domain(rule.host).allowed:
                found.append(rule.host)
        return tuple(found)

    def _host(self, host: str, port: int) -> Reach:
        address = parse_ip(host)
        if address is not None:
            named = self.rules.address_allowed(address, port)
            who = self.rules.outside_filter(host, port)
            if named is None or who is not None:
                return Reach(
                    False,
                    f"{host} is an IP address no address rule of this subagent's egress "
                    "allows; name the host instead",
                    "egress: IP literal",
                )
            return Reach(
                True, f"allowed by the address rule {named.text}", f"egress rule: {named.text}"
            )
        found = match(self.rules, host, port)
        if found.behavior == "deny":
            why = (
                f"the rule {found.rule.text} ({found.rule.source}) denies it"
                if found.rule is not None
                else f"it is outside the domains {found.narrowed_by} may reach"
            )
            decided = (
                f"egress rule: {found.rule.text}" if found.rule else f"egress: {found.narrowed_by}"
            )
            return Reach(False, f"{host}:{port} is not reachable by this subagent: {why}", decided)
        rule = found.rule
        if found.behavior == "allow" and rule is not None and not rule.raw:
            return Reach(
                True, f"allowed by the egress rule {rule.text}", f"egress rule: {rule.text}"
            )
        if found.behavior == "ask":
            why = f"the egress rule {rule.text if rule else '?'} asks, and a model request cannot wait"
        else:
            why = f"{host} is in no allowedDomains of this subagent"
        return Reach(
            False,
            f"{host}:{port} is not reachable through the model API: {why}; {_fix(host)}",
            "egress: no allow rule",
        )


def _under(rule: EgressRule, host: str) -> bool:
    """Whether deny `rule` names `host` or a name under it (any port)."""
    return rule.host == host or rule.host.endswith("." + host)


def provider_egress(rules: RuleSet | None) -> ProviderEgress:
    """The provider's destinations for a subagent with `rules` (None: no egress)."""
    return NO_EGRESS if rules is None else RuleSetEgress(rules)
