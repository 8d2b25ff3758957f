"""Egress rules: which destinations a sandbox may reach, in Claude Code's vocabulary.

A rule names a host pattern and says allow, ask or deny:
- `example.com` matches that host only; `*.example.com` matches every subdomain of
  it (not `example.com` itself: list both to allow both);
- an IP literal (`203.0.113.7`) or a CIDR (`203.0.113.0/24`, `2001:db8::/32`) names
  addresses: the only way to let a sandbox reach an IP literal, or a name that
  resolves to a loopback, link-local or private address;
- a `:PORT` suffix narrows a rule to one port (`registry.example.com:443`); without
  it the rule covers every port;
- `tcp://HOST:PORT` (port required; HOST may be any of the forms above) allows a
  raw TCP tunnel to that port: without it every CONNECT tunnel must carry TLS whose
  ClientHello names the host (see `tunnel`), so an allowed name cannot be used to
  carry another protocol, or another host's requests, to its address.

Deny wins over ask, ask over allow, whatever the sources; a destination no rule
names follows the permission mode (see `verdict.py`). Matching is on the lower-case
ASCII host name without a trailing dot; anything else a container sends as a host
(non-ASCII, empty labels, over-long names) is not a host and is refused.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from orchestrator.behavior import Behavior
from orchestrator.egress.addresses import IPAddress, Network, in_any, parse_ip
from orchestrator.errors import PolicyError

RuleBehavior = Behavior

RAW_TCP_PREFIX = "tcp://"
"""Marks a rule that allows raw TCP tunnels to its HOST:PORT."""
MAX_HOST_CHARS = 253
"""Longest DNS name (RFC 1035)."""
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class HostError(ValueError):
    """A host name a container sent is not a valid DNS name."""


def normal_host(host: str) -> str:
    """`host` lower-cased, without brackets or a trailing dot; HostError when it is
    not an IP literal or a syntactically valid ASCII DNS name."""
    text = host.strip().lower()
    if parse_ip(text) is not None:
        return text[1:-1] if text.startswith("[") else text
    text = text.removesuffix(".")
    if not text or len(text) > MAX_HOST_CHARS or not text.isascii():
        raise HostError(f"{host[:80]!r} is not a host name")
    if not all(_LABEL.match(label) for label in text.split(".")):
        raise HostError(f"{host[:80]!r} is not a host name")
    return text


MANAGED_ONLY = "allowManagedDomainsOnly"
"""Claude Code's managed-only `sandbox.network` key: only the managed settings'
allowed domains count (the name of the filter it sets, `RuleSet.only`)."""


@dataclass(frozen=True)
class EgressRule:
    """One host pattern with its behaviour and where it came from."""

    text: str
    """The pattern as written, e.g. `*.pypi.org`."""
    behavior: RuleBehavior
    source: str
    """`managed:PATH`, `cli:--allow-domain`, `project:PATH`, `agent NAME (PATH)`, …"""
    host: str = ""
    """Exact host, or the suffix after `*.`; empty for address rules."""
    wildcard: bool = False
    network: Network | None = None
    """The addresses an IP or CIDR rule names."""
    port: int | None = None
    raw: bool = False
    """`tcp://HOST:PORT`: a CONNECT tunnel needs no TLS (a raw TCP protocol)."""

    def matches(self, host: str, port: int) -> bool:
        """Whether this rule names `host` (already `normal_host`) on `port`."""
        if self.port is not None and port != self.port:
            return False
        if self.network is not None:
            address = parse_ip(host)
            return address is not None and in_any(address, (self.network,))
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def names_address(self, address: IPAddress, port: int) -> bool:
        """Whether this is an address rule covering `address` on `port`."""
        if self.network is None or (self.port is not None and port != self.port):
            return False
        return in_any(address, (self.network,))

    def describe(self) -> str:
        return f"{self.text} ({self.source})"


def parse_rule(text: object, behavior: RuleBehavior, source: str, where: str) -> EgressRule:
    """One pattern; PolicyError says where it was and what a pattern looks like."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(
            f"{where}: a domain rule must be a non-empty string like 'pypi.org' or "
            f"'*.example.com', got {text!r}"
        )
    pattern = text.strip()
    raw = pattern.lower().startswith(RAW_TCP_PREFIX)
    host, port = _split_port(pattern[len(RAW_TCP_PREFIX) :] if raw else pattern, where)
    if raw and port is None:
        raise PolicyError(
            f"{where}: {text!r}: a raw TCP rule names one port, like 'tcp://db.example.com:5432'"
        )
    try:
        network = ipaddress.ip_network(host.strip("[]"), strict=False)
    except ValueError:
        network = None
    if network is not None:
        return EgressRule(pattern, behavior, source, network=network, port=port, raw=raw)
    wildcard = host.startswith("*.")
    bare = host[2:] if wildcard else host
    if "*" in bare:
        raise PolicyError(
            f"{where}: {text!r}: '*' is only allowed as a whole first label ('*.example.com')"
        )
    try:
        bare = normal_host(bare)
    except HostError as exc:
        raise PolicyError(f"{where}: {text!r} is not a domain, IP address or CIDR") from exc
    return EgressRule(pattern, behavior, source, host=bare, wildcard=wildcard, port=port, raw=raw)


def _split_port(pattern: str, where: str) -> tuple[str, int | None]:
    if pattern.startswith("["):  # [v6]:port
        end = pattern.find("]")
        rest = pattern[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            raise PolicyError(f"{where}: {pattern!r} is not '[IPv6]' or '[IPv6]:port'")
        return pattern[: end + 1], _port(rest[1:], pattern, where) if rest else None
    if pattern.count(":") == 1:
        host, _, port = pattern.partition(":")
        return host, _port(port, pattern, where)
    return pattern, None


def _port(text: str, pattern: str, where: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise PolicyError(f"{where}: {pattern!r}: the port must be a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class RuleSet:
    """Every egress rule of one sandbox, highest source first."""

    rules: tuple[EgressRule, ...] = ()
    only: tuple[tuple[str, tuple[EgressRule, ...]], ...] = ()
    """Narrowing filters (an agent file's `network.allowedDomains`), each with the
    name of who set it: a destination must match one rule of every filter."""
    notes: tuple[str, ...] = ()
    """Rules read but not applied, and why (managed-only domains, an untrusted workspace)."""

    def first(self, behavior: RuleBehavior, host: str, port: int) -> EgressRule | None:
        return next(
            (r for r in self.rules if r.behavior == behavior and r.matches(host, port)), None
        )

    def outside_filter(self, host: str, port: int) -> str | None:
        """Who narrowed egress so that `host:port` is out, or None when every filter
        lets it through."""
        for who, rules in self.only:
            if not any(r.matches(host, port) for r in rules):
                return who
        return None

    def address_allowed(self, address: IPAddress, port: int) -> EgressRule | None:
        """The allow rule that names `address` explicitly (no deny rule naming it)."""
        if any(r.behavior == "deny" and r.names_address(address, port) for r in self.rules):
            return None
        return next(
            (r for r in self.rules if r.behavior == "allow" and r.names_address(address, port)),
            None,
        )

    def raw_tcp(self, host: str, port: int) -> EgressRule | None:
        """The allow or ask rule `tcp://…` naming `host:port` (a raw tunnel), if any."""
        return next(
            (r for r in self.rules if r.raw and r.behavior != "deny" and r.matches(host, port)),
            None,
        )

    @property
    def any_allow(self) -> bool:
        return any(r.behavior == "allow" for r in self.rules)

    def narrowed(
        self, who: str, allowed: Sequence[EgressRule], denied: Iterable[EgressRule]
    ) -> RuleSet:
        """These rules, with `denied` added and (when given) only `allowed` reachable."""
        only = (*self.only, (who, tuple(allowed))) if allowed else self.only
        return RuleSet(rules=(*self.rules, *denied), only=only, notes=self.notes)


@dataclass
class Match:
    """The rule that decided a destination, or none."""

    behavior: RuleBehavior | None
    rule: EgressRule | None = None
    narrowed_by: str | None = None
    notes: list[str] = field(default_factory=list)


def match(rules: RuleSet, host: str, port: int) -> Match:
    """Deny → (outside an agent's filter: deny) → ask → allow; no match: behaviour None."""
    if rule := rules.first("deny", host, port):
        return Match("deny", rule)
    if who := rules.outside_filter(host, port):
        return Match("deny", narrowed_by=who)
    if rule := rules.first("ask", host, port):
        return Match("ask", rule)
    if rule := rules.first("allow", host, port):
        return Match("allow", rule)
    return Match(None)
