"""What the broker forwards upstream: client tools by default, everything that
makes the API reach the network (or change billing) only when a rule allows it.

A sandbox has no network, but the Messages API has server-side tools: with
`web_fetch`, `web_search`, `code_execution`, an MCP connector (`mcp_servers`),
or an image/document block whose source is a URL, Anthropic's servers fetch on
the request's behalf. Those are network egress, so each needs an allow rule in
the same vocabulary as every other permission:

| request part                                  | rule                                   |
|-----------------------------------------------|----------------------------------------|
| custom tool (`input_schema`), `bash_*`, `text_editor_*`, `memory_*`, `computer_*` | none: client tools run in the sandbox |
| `web_search_*` tool                           | `WebSearch`, `WebSearch(domain:x.org)` |
| `web_fetch_*` tool, URL image/document source | `WebFetch`, `WebFetch(domain:x.org)`   |
| `code_execution_*` tool                       | `CodeExecution`                        |
| `tool_search_tool_*`, `advisor_*` tool        | `ToolSearch`, `Advisor`                |
| any other server tool type T                  | `ServerTool(T)`                        |
| `mcp_servers` entry / `mcp_toolset` named S   | `mcp__S`                               |
| `anthropic-beta: B` header value              | `AnthropicBeta(B)` (or `AnthropicBeta`) |
| `metadata`, `service_tier`, `container`, `context_management` | `RequestField(NAME)`     |

Deny rules win; `ask` rules count as no allow (a model request cannot wait for
a human); no permission mode grants these (not even `bypassPermissions`: it
is about tool calls in the sandbox, not egress). Domain rules restrict the tool
to those domains: the broker sets `allowed_domains` when the request has none,
and refuses one that names a domain outside them.

A request with anything not allowed is REFUSED (400 in Anthropic's error
shape, naming the part and the rule that would allow it) rather than stripped:
stripping would let the model believe it searched or fetched when it did not,
and warden's own runner never sends these parts, so only a tampered client
meets a refusal. Every allowed or refused part is returned as a decision for
the audit. Unknown top-level fields are refused too (new API features are
egress until someone decides otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.permissions.rules import Rule

PASSED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "thinking",
        "stream",
    }
)
"""Top-level request fields that need no rule (the host still bounds model and max_tokens)."""
POLICY_FIELDS = frozenset({"metadata", "service_tier", "container", "context_management"})
"""Top-level fields forwarded only with a `RequestField(NAME)` allow rule."""
CLIENT_TOOL_PREFIXES = ("bash_", "text_editor_", "memory_", "computer_")
"""Anthropic-defined tool types the client (the sandbox) executes."""
SERVER_TOOL_RULES = {
    "web_search_": "WebSearch",
    "web_fetch_": "WebFetch",
    "code_execution_": "CodeExecution",
    "tool_search_tool_": "ToolSearch",
    "advisor_": "Advisor",
}
"""Server tool type prefix → the rule name that allows it."""
DOMAIN_TOOLS = frozenset({"WebSearch", "WebFetch"})
MAX_BLOCKS_SCANNED = 200_000
"""JSON objects inspected for URL sources (every object at any depth of messages and
system); a request with more is refused, never forwarded half-inspected."""


class ForwardingRefused(Exception):
    """The request asks for something policy does not allow."""

    def __init__(self, message: str, decisions: list[ForwardDecision]) -> None:
        super().__init__(message)
        self.decisions = decisions


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

    @classmethod
    def from_rules(cls, rules: Iterable[Rule]) -> ForwardingPolicy:
        rules = tuple(rules)
        return cls(
            allow=tuple(r for r in rules if r.behavior == "allow"),
            deny=tuple(r for r in rules if r.behavior == "deny"),
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

    def _domains(self, rules: tuple[Rule, ...], name: str) -> list[tuple[str, Rule]]:
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
                label, detail, False, f"rule: {denied[0].text}", f"{label} is denied by policy"
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
                    subject, detail, False, f"rule: {whole_deny[0].text}", f"{subject} is denied"
                ),
                None,
                [],
            )
        denied_domains = self._domains(self.deny, subject)
        for domain in domains or []:
            for blocked, rule in denied_domains:
                if _covers(blocked, domain):
                    return (
                        ForwardDecision(
                            subject,
                            detail,
                            False,
                            f"rule: {rule.text}",
                            f"{subject} of {domain} is denied by policy",
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
        allowed_domains = self._domains(self.allow, subject)
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
            outside = [d for d in domains if not any(_covers(r, d) for r in rule_domains)]
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


def _covers(rule_domain: str, domain: str) -> bool:
    host = domain.strip().lower().split("/", 1)[0].removeprefix("*.")
    return host == rule_domain or host.endswith("." + rule_domain)


@dataclass
class Forwarded:
    """The outcome of a forwarding check that passed."""

    body: JSONObject
    betas: list[str]
    decisions: list[ForwardDecision] = field(default_factory=list)


def check_request(policy: ForwardingPolicy, body: JSONObject, beta_header: str | None) -> Forwarded:
    """Check (and for domain rules, narrow) one Messages API request.

    Raises ForwardingRefused naming every part that policy does not allow."""
    decisions: list[ForwardDecision] = []
    for name in body:
        if name in PASSED_FIELDS:
            continue
        if name == "mcp_servers":
            continue  # decided per server below
        if name in POLICY_FIELDS:
            decisions.append(policy.may_forward("RequestField", name, {"field": str(name)}))
        else:
            decisions.append(
                ForwardDecision(
                    f"RequestField({name})",
                    {"field": str(name)[:100]},
                    False,
                    "broker forwarding policy (unknown field)",
                    f"request field {str(name)[:100]!r} is not one the broker forwards",
                )
            )
    servers = body.get("mcp_servers")
    if servers is not None:
        if not isinstance(servers, list):
            servers = [servers]
        for server in servers:
            entry = server if isinstance(server, dict) else {}
            server_name = str(entry.get("name", ""))[:100]
            detail: JSONObject = {"mcp_server": server_name, "url": str(entry.get("url", ""))[:300]}
            decisions.append(policy.may_forward(f"mcp__{server_name}", None, detail))
    tools = body.get("tools")
    if isinstance(tools, list):
        body = {**body, "tools": [_check_tool(policy, t, decisions) for t in tools]}
    if _has_url_source(body.get("messages")) or _has_url_source(body.get("system")):
        decision, _, _ = policy.may_forward_domains(
            "WebFetch", None, {"content": "an image or document block with a URL source"}
        )
        if decision.allowed and decision.reason.startswith("WebFetch limited"):
            decision = ForwardDecision(
                decision.subject,
                decision.detail,
                False,
                "broker forwarding policy (domain rules)",
                "URL sources in content are fetched without a domain limit; they need a "
                "whole-tool `WebFetch` allow rule",
            )
        decisions.append(decision)
    betas = [b.strip() for b in (beta_header or "").split(",") if b.strip()]
    for beta in betas:
        decisions.append(policy.may_forward("AnthropicBeta", beta[:100], {"anthropic-beta": beta[:100]}))
    refused = [d for d in decisions if not d.allowed]
    if refused:
        raise ForwardingRefused(
            "the broker does not forward this request: "
            + "; ".join(d.reason for d in refused)
            + ". Server-side tools, MCP servers, betas and billing fields reach the "
            "network or change billing on the host's key; a policy allow rule enables each.",
            decisions,
        )
    return Forwarded(body=body, betas=betas, decisions=decisions)


def _check_tool(
    policy: ForwardingPolicy, tool: JSONValue, decisions: list[ForwardDecision]
) -> JSONValue:
    if not isinstance(tool, dict):
        return tool  # the API rejects it; nothing to forward-check
    kind = tool.get("type")
    if kind in (None, "custom") or (
        isinstance(kind, str) and kind.startswith(CLIENT_TOOL_PREFIXES)
    ):
        return tool
    described: JSONObject = {k: v for k, v in tool.items() if k != "input_schema"}
    detail: JSONObject = {"tool": described}
    if not isinstance(kind, str):
        decisions.append(
            ForwardDecision(
                "ServerTool", detail, False, "broker forwarding policy", "tool type is not text"
            )
        )
        return tool
    if kind == "mcp_toolset":
        server = tool.get("mcp_server_name")
        decisions.append(policy.may_forward(f"mcp__{server}", None, detail))
        return tool
    subject = next((r for p, r in SERVER_TOOL_RULES.items() if kind.startswith(p)), None)
    if subject is None:
        decisions.append(policy.may_forward("ServerTool", kind[:100], detail))
        return tool
    if subject not in DOMAIN_TOOLS:
        decisions.append(policy.may_forward(subject, None, detail))
        return tool
    asked = tool.get("allowed_domains")
    domains = [str(d) for d in asked] if isinstance(asked, list) else None
    decision, set_domains, add_blocked = policy.may_forward_domains(subject, domains, detail)
    if decision.allowed and set_domains is not None:
        if tool.get("blocked_domains"):
            decision = ForwardDecision(
                subject,
                detail,
                False,
                decision.decided_by,
                f"{subject} with blocked_domains cannot be limited to the allowed domains; "
                "send allowed_domains instead",
            )
        else:
            tool = {**tool, "allowed_domains": list[JSONValue](set_domains)}
    elif decision.allowed and add_blocked:
        blocked = tool.get("blocked_domains")
        tool = {
            **tool,
            "blocked_domains": [*(blocked if isinstance(blocked, list) else []), *add_blocked],
        }
    decisions.append(decision)
    return tool


def _has_url_source(value: JSONValue) -> bool:
    """Whether any object at any depth has a `source` of type `url`. Every value is
    walked, not only `content` lists: a URL image can sit inside a document whose
    source is `content`, a tool result, a search result, or a block type the API adds
    later, and the API fetches it wherever it is. Iterative, so depth costs no stack;
    bounded by `MAX_BLOCKS_SCANNED` objects."""
    stack: list[JSONValue] = [value]
    budget = MAX_BLOCKS_SCANNED
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            budget -= 1
            if budget < 0:
                raise ForwardingRefused(
                    f"the request has more than {MAX_BLOCKS_SCANNED} JSON objects; the broker "
                    "does not forward requests it cannot inspect completely",
                    [],
                )
            source = item.get("source")
            if isinstance(source, dict) and source.get("type") == "url":
                return True
            stack.extend(item.values())
    return False
