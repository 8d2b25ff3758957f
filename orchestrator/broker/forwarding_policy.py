"""How the permission rules decide one part of a model request: the rule lookup behind
`broker.forwarding` (which walks the request and says what each part is).

Deny rules win; `ask` rules count as no allow (a model request cannot wait for
a human); no permission mode grants these (not even `bypassPermissions`: it
is about tool calls in the sandbox, not egress). A web_search/web_fetch part
is decided by its `domain:` rules: the request's own domains, each checked
against them, or (when it names none) the domains the allow rules name, less
those a deny or ask rule covers. Every answer is a `ForwardDecision`, audited.

This module owns the meaning of the rules for forwarding; `broker.forwarding`
owns which request parts exist and what each needs, and `broker.provider_egress`
where the provider may go for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.broker.provider_egress import NO_EGRESS, ProviderEgress
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.rules import Rule


@dataclass(frozen=True)
class ForwardDecision:
    """One request part put to the policy (audited)."""

    subject: str
    """The rule-vocabulary name of the part, e.g. `WebFetch` or `AnthropicBeta(x)`."""
    detail: JSONObject
    """What the request asked for (the tool definition, header value, field name)."""
    allowed: bool
    decided_by: str
    """`rule: TEXT` or `broker forwarding policy (no allow rule)`."""
    reason: str


@dataclass(frozen=True)
class ForwardingPolicy:
    """The allow and deny rules that govern forwarding, from a task's effective policy."""

    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    """Deny rules, then ask rules: a model request cannot wait for a person, so what
    a rule asks about is refused here (the most restrictive answer wins: an ask is
    never lost to an allow of any scope)."""
    egress: ProviderEgress = NO_EGRESS
    """Where the subagent's egress lets the provider go (default: nowhere)."""

    @classmethod
    def from_rules(
        cls, rules: Iterable[Rule], egress: ProviderEgress = NO_EGRESS
    ) -> ForwardingPolicy:
        rules = tuple(rules)
        return cls(
            allow=tuple(r for r in rules if r.behavior == "allow"),
            deny=tuple(r for r in rules if r.behavior == "deny")
            + tuple(r for r in rules if r.behavior == "ask"),
            egress=egress,
        )

    # -- rule lookup ----------------------------------------------------

    def _rules(self, rules: tuple[Rule, ...], name: str, spec: str | None) -> list[Rule]:
        """Rules for tool `name` covering `spec` (None: rules for the whole tool only)."""
        found = []
        for rule in rules:
            if rule.tool != name:
                continue
            if rule.whole_tool or (spec is not None and rule.specifier == spec):
                found.append(rule)
        return found

    def domain_rules(self, rules: tuple[Rule, ...], name: str) -> list[tuple[str, Rule]]:
        """The `domain:` rules for tool `name` in `rules`: (domain, rule) pairs."""
        out = []
        for rule in rules:
            if rule.tool == name and not rule.whole_tool and rule.specifier:
                spec = rule.specifier.strip()
                if spec.startswith("domain:"):
                    out.append((spec[len("domain:") :].strip().lower().removeprefix("*."), rule))
        return out

    def may_forward(self, subject: str, spec: str | None, detail: JSONObject) -> ForwardDecision:
        """A part with no domain semantics: a deny rule wins, then an allow rule."""
        denied = self._rules(self.deny, subject, spec)
        label = f"{subject}({spec})" if spec is not None else subject
        if denied:
            return ForwardDecision(
                label, detail, False, f"rule: {denied[0].text}", f"{label} {_refused(denied[0])}"
            )
        allowed = self._rules(self.allow, subject, spec)
        if allowed:
            return ForwardDecision(
                label, detail, True, f"rule: {allowed[0].text}", f"{label} is allowed by policy"
            )
        return ForwardDecision(
            label,
            detail,
            False,
            "broker forwarding policy (no allow rule)",
            f"{label} is not forwarded without an allow rule `{label}`",
        )

    def may_forward_domains(
        self, subject: str, domains: list[str] | None, detail: JSONObject
    ) -> tuple[ForwardDecision, list[str] | None, list[str]]:
        """A WebSearch/WebFetch part: (decision, allowed_domains to set, blocked to add)."""
        whole_deny = self._rules(self.deny, subject, None)
        if whole_deny:
            return (
                ForwardDecision(
                    subject,
                    detail,
                    False,
                    f"rule: {whole_deny[0].text}",
                    f"{subject} {_refused(whole_deny[0])}",
                ),
                None,
                [],
            )
        denied_domains = self.domain_rules(self.deny, subject)
        for domain in domains or []:
            for blocked, rule in denied_domains:
                if covers(blocked, domain):
                    return (
                        ForwardDecision(
                            subject,
                            detail,
                            False,
                            f"rule: {rule.text}",
                            f"{subject} of {domain} {_refused(rule)}",
                        ),
                        None,
                        [],
                    )
        whole_allow = self._rules(self.allow, subject, None)
        if whole_allow:
            extra_blocked = [] if domains else [d for d, _ in denied_domains]
            return (
                ForwardDecision(
                    subject, detail, True, f"rule: {whole_allow[0].text}", f"{subject} is allowed"
                ),
                None,
                extra_blocked,
            )
        allowed_domains = self.domain_rules(self.allow, subject)
        if not allowed_domains:
            return (
                ForwardDecision(
                    subject,
                    detail,
                    False,
                    "broker forwarding policy (no allow rule)",
                    f"{subject} is network egress through the model API; it is not forwarded "
                    f"without an allow rule such as `{subject}` or `{subject}(domain:example.com)`",
                ),
                None,
                [],
            )
        rule_domains = [d for d, _ in allowed_domains]
        if domains:
            outside = [d for d in domains if not any(covers(r, d) for r in rule_domains)]
            if outside:
                return (
                    ForwardDecision(
                        subject,
                        detail,
                        False,
                        "broker forwarding policy (domain rules)",
                        f"{subject} of {', '.join(outside)} is outside the allowed domains "
                        f"({', '.join(rule_domains)})",
                    ),
                    None,
                    [],
                )
            return (
                ForwardDecision(
                    subject, detail, True, f"rule: {allowed_domains[0][1].text}", "domains allowed"
                ),
                None,
                [],
            )
        # Domains a deny or ask rule covers leave the list; one inside an allowed domain
        # cannot be cut out of it (the API takes allowed or blocked domains, not both).
        rule_domains = [
            r for r in rule_domains if not any(covers(b, r) for b, _ in denied_domains)
        ]
        inside = [
            (b, rule) for b, rule in denied_domains if any(covers(r, b) for r in rule_domains)
        ]
        if inside or not rule_domains:
            why = (
                f"{inside[0][1].text} narrows an allowed domain, which the model API cannot "
                "be told; name the fetched domains in the request to decide each"
                if inside
                else "every allowed domain is denied or asked about"
            )
            return (
                ForwardDecision(
                    subject,
                    detail,
                    False,
                    f"rule: {inside[0][1].text}" if inside else "broker forwarding policy",
                    f"{subject} without named domains is refused: {why}",
                ),
                None,
                [],
            )
        return (
            ForwardDecision(
                subject,
                detail,
                True,
                f"rule: {allowed_domains[0][1].text}",
                f"{subject} limited to {', '.join(rule_domains)}",
            ),
            rule_domains,
            [],
        )


def _refused(rule: Rule) -> str:
    if rule.behavior == "deny":
        return "is denied by policy"
    return (
        f"needs approval ({rule.text}), which the broker cannot wait for inside a model "
        "request: refused"
    )


def covers(rule_domain: str, domain: str) -> bool:
    """Whether `domain` (or a URL's host part) is `rule_domain` or one of its subdomains."""
    host = domain.strip().lower().split("/", 1)[0].removeprefix("*.")
    return host == rule_domain or host.endswith("." + rule_domain)
