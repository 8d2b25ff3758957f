"""What the broker forwards upstream: client tools by default, everything that
makes the API reach the network (or change billing) only when a rule allows it.

A sandbox has no network, but the Messages API has server-side tools: with
`web_fetch`, `web_search`, `code_execution`, an MCP connector (`mcp_servers`),
or an image/document block whose source is a URL, Anthropic's servers fetch on
the request's behalf. Those are network egress, so each needs an allow rule in
the same vocabulary as every other permission:

| request part                                  | rule                                   | and the subagent's egress |
|-----------------------------------------------|----------------------------------------|---------------------------|
| custom tool (`input_schema`), a known client tool type (`CLIENT_TOOL_TYPES`: `bash_*`, `text_editor_*`, `memory_*`, `computer_*` versions) | none: client tools run in the sandbox | - |
| `web_search_*` tool                           | `WebSearch`, `WebSearch(domain:x.org)` | allows each domain |
| `web_fetch_*` tool                            | `WebFetch`, `WebFetch(domain:x.org)`   | allows each domain |
| URL image/document source                     | `WebFetch`                             | allows the URL's host:port |
| `code_execution_*` tool                       | `CodeExecution`                        | is on (not `none`) |
| `tool_search_tool_*`, `advisor_*` tool        | `ToolSearch`, `Advisor`                | - |
| any other tool type T (unknown: a server tool) | `ServerTool(T)`                       | is on (not `none`) |
| `mcp_servers` entry named S                   | `mcp__S`                               | allows its URL's host:port |
| `mcp_toolset` of server S                     | `mcp__S`                               | - (its server is checked) |
| `anthropic-beta: B` header value              | `AnthropicBeta(B)` (or `AnthropicBeta`) | - |
| `metadata`, `service_tier`, `container`, `context_management` | `RequestField(NAME)`     | - |
| `output_config` holding only `effort` (a level) | none: how hard the model thinks, inside the budget | - |
| `output_config` with anything else (`format`, `task_budget`, ...) | `RequestField(output_config)` | - |

The model API is egress: whatever a permission rule allows, the provider reaches
only what that subagent's egress proxy would let it reach (`provider_egress`), so a
subagent with `network: none` gets no server tool that fetches, no MCP server and
no URL source. A tool type not known to run in the sandbox is a server tool: an
unknown `type` is refused, never forwarded as if it were a client tool.

Deny rules win; `ask` rules count as no allow (a model request cannot wait for
a human); no permission mode grants these (not even `bypassPermissions`: it
is about tool calls in the sandbox, not egress). A web_search/web_fetch tool
always leaves with an explicit `allowed_domains`: the request's own, each checked
against the permission's domain rules and the subagent's egress, or (when it has
none) the domains both allow; a request with only `blocked_domains` is refused.

A request with anything not allowed is REFUSED (400 in Anthropic's error
shape, naming the part and the rule that would allow it) rather than stripped:
stripping would let the model believe it searched or fetched when it did not,
and warden's own runner never sends these parts, so only a tampered client
meets a refusal. Every allowed or refused part is returned as a decision for
the audit. Unknown top-level fields are refused too (new API features are
egress until someone decides otherwise).

This module owns what a request is made of (which parts exist and what each
needs); `broker.forwarding_policy` owns how the rules decide one part, and
`broker.provider_egress` where the subagent's egress lets the provider go.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.broker.forwarding_policy import ForwardDecision, ForwardingPolicy, covers
from orchestrator.broker.provider_egress import NO_EGRESS_REASON, Reach
from orchestrator.jsontypes import JSONObject, JSONValue
from sandbox_tools import wire

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
CLIENT_TOOL_TYPES = frozenset(
    {
        "bash_20241022",
        "bash_20250124",
        "text_editor_20241022",
        "text_editor_20250124",
        "text_editor_20250429",
        "text_editor_20250728",
        "computer_20241022",
        "computer_20250124",
        "computer_20251124",
        "memory_20250818",
    }
)
"""Anthropic-defined tool types the client (the sandbox) executes: a closed list, so a
new version is a server tool until someone checks it runs in the sandbox and adds it."""
SERVER_TOOL_RULES = {
    "web_search_": "WebSearch",
    "web_fetch_": "WebFetch",
    "code_execution_": "CodeExecution",
    "tool_search_tool_": "ToolSearch",
    "advisor_": "Advisor",
}
"""Server tool type prefix → the rule name that allows it."""
DOMAIN_TOOLS = frozenset({"WebSearch", "WebFetch"})
NETWORK_TOOLS = frozenset({"CodeExecution", "ServerTool"})
"""Rules whose tools reach the network on the provider's side with no destination
warden can check: forwarded only to a subagent whose egress is on."""
MAX_URL_SOURCES = 100
"""URL sources checked one by one in one request; a request with more is refused."""
MAX_BLOCKS_SCANNED = 200_000
"""JSON objects inspected for URL sources (every object at any depth of messages and
system); a request with more is refused, never forwarded half-inspected."""

class ForwardingRefused(Exception):
    """The request asks for something policy does not allow."""

    def __init__(self, message: str, decisions: list[ForwardDecision]) -> None:
        super().__init__(message)
        self.decisions = decisions


@dataclass
class Forwarded:
    """The outcome of a forwarding check that passed."""

    body: JSONObject
    betas: list[str]
    decisions: list[ForwardDecision] = field(default_factory=list)


def check_request(policy: ForwardingPolicy, body: JSONObject, beta_header: str | None) -> Forwarded:
    """THE gate between a subagent and the model API: check (and for web tools, narrow
    to explicit `allowed_domains`) one Messages API request against the permission
    rules and the subagent's egress (`policy.egress`). Every server tool, MCP server,
    URL source, beta and billing field passes through here.

    Returns the body to forward with the decisions to audit; raises ForwardingRefused
    naming every part that is not allowed and what would allow it."""
    decisions: list[ForwardDecision] = []
    for name in body:
        if name in PASSED_FIELDS or (name == "output_config" and _effort_only(body[name])):
            continue
        if name == "output_config":
            decisions.append(policy.may_forward("RequestField", name, {"field": "output_config"}))
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
        for server in servers if isinstance(servers, list) else [servers]:
            decisions.append(_check_mcp_server(policy, server))
    tools = body.get("tools")
    if isinstance(tools, list):
        body = {**body, "tools": [_check_tool(policy, t, decisions) for t in tools]}
    urls = _url_sources(body.get("messages")) + _url_sources(body.get("system"))
    if urls:
        decisions.append(_check_url_sources(policy, urls))
    betas = [b.strip() for b in (beta_header or "").split(",") if b.strip()]
    for beta in betas:
        decisions.append(
            policy.may_forward("AnthropicBeta", beta[:100], {"anthropic-beta": beta[:100]})
        )
    refused = [d for d in decisions if not d.allowed]
    if refused:
        raise ForwardingRefused(
            "the broker does not forward this request: "
            + "; ".join(d.reason for d in refused)
            + ". Server-side tools, MCP servers, betas and billing fields reach the "
            "network or change billing on the host's key; each needs a policy allow rule, "
            "and what reaches the network also needs the subagent's egress to allow it.",
            decisions,
        )
    return Forwarded(body=body, betas=betas, decisions=decisions)


def _effort_only(config: JSONValue) -> bool:
    """Whether `output_config` is `{"effort": LEVEL}` and nothing else (an agent's
    `effort`, as Claude Code sends it: it changes how the model spends tokens the
    budget already bounds, and reaches nothing)."""
    return (
        isinstance(config, dict)
        and set(config) == {"effort"}
        and config["effort"] in wire.EFFORT_LEVELS
    )


def _unreachable(decision: ForwardDecision, reach: Reach) -> ForwardDecision:
    """`decision` (allowed by a permission rule) refused by the subagent's egress."""
    return ForwardDecision(
        decision.subject,
        decision.detail,
        False,
        reach.decided_by,
        f"{decision.subject}: {reach.reason}",
    )


def _no_egress(decision: ForwardDecision, policy: ForwardingPolicy) -> ForwardDecision:
    """`decision`, refused when the subagent has no egress at all."""
    if not decision.allowed or policy.egress.enabled:
        return decision
    return _unreachable(decision, Reach(False, NO_EGRESS_REASON, "egress: none"))


def _check_mcp_server(policy: ForwardingPolicy, server: JSONValue) -> ForwardDecision:
    entry = server if isinstance(server, dict) else {}
    name = str(entry.get("name", ""))[:100]
    url = entry.get("url")
    detail: JSONObject = {"mcp_server": name, "url": str(url)[:300]}
    decision = policy.may_forward(f"mcp__{name}", None, detail)
    if not decision.allowed:
        return decision
    if not isinstance(url, str):
        return _unreachable(decision, Reach(False, "an MCP server needs a `url`", "broker"))
    reach = policy.egress.url(url)
    return decision if reach.allowed else _unreachable(decision, reach)


def _check_url_sources(policy: ForwardingPolicy, urls: list[str]) -> ForwardDecision:
    """Image/document blocks whose `source` is a URL: the provider fetches each (and
    follows redirects), so they need a whole-tool `WebFetch` allow rule and each
    URL's host must be one the subagent's egress reaches."""
    detail: JSONObject = {
        "content": "image or document blocks with a URL source",
        "urls": [u[:300] for u in urls[:10]],
    }
    if len(urls) > MAX_URL_SOURCES:
        return ForwardDecision(
            "WebFetch", detail, False, "broker forwarding policy",
            f"the request has more than {MAX_URL_SOURCES} URL sources; send fewer",
        )  # fmt: skip
    decision, _, _ = policy.may_forward_domains("WebFetch", None, detail)
    if decision.allowed and decision.reason.startswith("WebFetch limited"):
        return ForwardDecision(
            decision.subject,
            decision.detail,
            False,
            "broker forwarding policy (domain rules)",
            "URL sources in content are fetched without a domain limit (redirects are "
            "followed); they need a whole-tool `WebFetch` allow rule",
        )
    if not decision.allowed:
        return decision
    for url in urls:
        reach = policy.egress.url(url)
        if not reach.allowed:
            return _unreachable(decision, reach)
    return decision


def _check_tool(
    policy: ForwardingPolicy, tool: JSONValue, decisions: list[ForwardDecision]
) -> JSONValue:
    if not isinstance(tool, dict):
        return tool  # the API rejects it; nothing to forward-check
    kind = tool.get("type")
    if kind in CLIENT_TOOL_TYPES or (
        kind in (None, "custom") and isinstance(tool.get("input_schema"), dict)
    ):
        return tool
    described: JSONObject = {k: v for k, v in tool.items() if k != "input_schema"}
    detail: JSONObject = {"tool": described}
    if not isinstance(kind, str):
        decisions.append(
            ForwardDecision(
                "ServerTool",
                detail,
                False,
                "broker forwarding policy",
                "a tool without a text `type` needs an `input_schema` (a client tool)",
            )
        )
        return tool
    if kind == "mcp_toolset":
        server = tool.get("mcp_server_name")
        decisions.append(policy.may_forward(f"mcp__{server}", None, detail))
        return tool
    subject = next((r for p, r in SERVER_TOOL_RULES.items() if kind.startswith(p)), None)
    if subject is None:
        decision = policy.may_forward("ServerTool", kind[:100], detail)
        decisions.append(_no_egress(decision, policy))
        return tool
    if subject not in DOMAIN_TOOLS:
        decision = policy.may_forward(subject, None, detail)
        decisions.append(_no_egress(decision, policy) if subject in NETWORK_TOOLS else decision)
        return tool
    decision, tool = _check_domain_tool(policy, subject, tool, detail)
    decisions.append(decision)
    return tool


def _check_domain_tool(
    policy: ForwardingPolicy, subject: str, tool: JSONObject, detail: JSONObject
) -> tuple[ForwardDecision, JSONObject]:
    """A web_search/web_fetch tool: allowed by a permission rule, then limited to an
    explicit `allowed_domains` that the subagent's egress reaches in full."""
    asked = tool.get("allowed_domains")
    domains = [str(d) for d in asked] if isinstance(asked, list) else None
    decision, set_domains, _ = policy.may_forward_domains(subject, domains, detail)
    if not decision.allowed:
        return decision, tool
    decision = _no_egress(decision, policy)
    if not decision.allowed:
        return decision, tool
    denied = [d for d, _ in policy.domain_rules(policy.deny, subject)]
    if domains:
        for domain in domains:
            host = domain.strip().lower().split("/", 1)[0].removeprefix("*.")
            if any(covers(host, d) for d in denied):
                reach = Reach(
                    False,
                    f"{host} covers a subdomain that a {subject} deny rule names",
                    "broker forwarding policy (domain rules)",
                )
                return _unreachable(decision, reach), tool
            reach = policy.egress.domain(domain)
            if not reach.allowed:
                return _unreachable(decision, reach), tool
        return decision, tool
    if tool.get("blocked_domains"):
        reach = Reach(
            False,
            "blocked_domains alone leaves every other domain open; send allowed_domains",
            "broker forwarding policy (domain rules)",
        )
        return _unreachable(decision, reach), tool
    candidates = set_domains if set_domains is not None else list(policy.egress.domains())
    final = [
        d
        for d in candidates
        if policy.egress.domain(d).allowed
        and not any(covers(d, b) or covers(b, d) for b in denied)
    ]
    if not final:
        reach = Reach(
            False,
            f"no domain is allowed both by the {subject} rules and by this subagent's egress "
            f"({', '.join(candidates[:10]) or 'it allows none'})",
            "broker forwarding policy (egress)",
        )
        return _unreachable(decision, reach), tool
    narrowed = ForwardDecision(
        decision.subject,
        decision.detail,
        True,
        decision.decided_by,
        f"{subject} limited to {', '.join(final)}",
    )
    return narrowed, {**tool, "allowed_domains": list[JSONValue](final)}


def _url_sources(value: JSONValue) -> list[str]:
    """The URL of every object at any depth whose `source` has type `url`. Every value
    is walked, not only `content` lists: a URL image can sit inside a document whose
    source is `content`, a tool result, a search result, or a block type the API adds
    later, and the API fetches it wherever it is. Iterative, so depth costs no stack;
    bounded by `MAX_BLOCKS_SCANNED` objects. A URL source without a text `url` is
    reported as the empty string (no host: refused)."""
    found: list[str] = []
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
                url = source.get("url")
                found.append(url if isinstance(url, str) else "")
            stack.extend(item.values())
    return found
