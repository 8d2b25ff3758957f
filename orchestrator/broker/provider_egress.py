"""Where the model provider may go on a subagent's behalf: that subagent's egress.

Server tools (`web_fetch`, `web_search`, `code_execution`, ...), MCP connectors and
URL sources make Anthropic's servers reach the network for the request. The sandbox
has no route out, so these are its only way out through the model API, and they
are held to the same destinations as its egress proxy: a subagent whose egress is
off (`network: none`, `allowedDomains: []`, no egress for the run or its parent)
gets none of them, whatever permission rule allows the tool.

`ProviderEgress` is what the broker asks (`forwarding` holds one per subagent);
`NO_EGRESS` is the answer for a subagent without egress. The implementation over
the egress proxy's rules lives in `orchestrator.egress.provider` (the broker may not
import the egress package: egress imports the broker).

Decided without DNS and without a person: a host is reachable by the provider when
an allow rule of that subagent's egress names it (a rule for HTTP(S), not a raw TCP
or address rule), no deny rule names it, and every agent-file filter lets it through.
An `ask` rule, or a destination no rule names, is refused in every permission mode:
a model request cannot wait for a person, and the provider's fetch happens outside
every wall warden holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Reach:
    """Whether the provider may reach one destination for this subagent, and why."""

    allowed: bool
    reason: str
    """One line: the rule that allows it, or why not and what would allow it."""
    decided_by: str
    """`egress rule: PATTERN`, `egress: none`, ... (for the audit)."""


class ProviderEgress(Protocol):
    """One subagent's egress, as the model provider's destinations."""

    @property
    def enabled(self) -> bool:
        """False for a subagent with no egress at all (`network: none`)."""
        ...

    def domain(self, domain: str) -> Reach:
        """May the provider fetch from API domain `domain` (a `web_fetch`/`web_search`
        `allowed_domains` entry: the domain and its subdomains)?"""
        ...

    def url(self, url: str) -> Reach:
        """May the provider connect to `url`'s host and port (an MCP server, a URL
        source)?"""
        ...

    def domains(self) -> tuple[str, ...]:
        """The allowlist as API `allowed_domains` entries (each passes `domain`)."""
        ...


NO_EGRESS_REASON = (
    "this subagent has no network egress (its agent file says `network: none` or "
    "`allowedDomains: []`, its parent has none, or the run has no egress), so the model "
    "API may not reach the network for it either"
)


class _NoEgress:
    """The provider reaches nothing for this subagent."""

    enabled = False

    def domain(self, domain: str) -> Reach:
        return Reach(False, NO_EGRESS_REASON, "egress: none")

    def url(self, url: str) -> Reach:
        return Reach(False, NO_EGRESS_REASON, "egress: none")

    def domains(self) -> tuple[str, ...]:
        return ()


NO_EGRESS: ProviderEgress = _NoEgress()
"""A subagent without egress: every server tool, MCP server and URL source refused."""


def url_host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s) URL, None when it is not one (refused by the caller)."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not host:
        return None
    return host, port or (443 if parts.scheme == "https" else 80)
