"""Which IP addresses a sandbox may reach: public unicast only, unless a rule names them.

Refused by default: loopback, link-local (169.254/16 and fe80::/10, where cloud
metadata services answer), private ranges (RFC 1918, ULA fc00::/7, CGNAT
100.64/10), "this network" 0.0.0.0/8, multicast, reserved and documentation
ranges, and IPv6 forms that embed an IPv4 address (mapped, 6to4, NAT64), which are
judged by the address they carry. The standard library's `ipaddress` knows the
ranges; this module only says which of its facts refuse an address, and why.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CGNAT = ipaddress.ip_network("100.64.0.0/10")
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")


def parse_ip(text: str) -> IPAddress | None:
    """`text` as an IP address (brackets and an IPv6 zone allowed), else None."""
    candidate = text.strip()
    if candidate.startswith("[") and candidate.endswith("]"):
        candidate = candidate[1:-1]
    candidate = candidate.split("%", 1)[0]
    try:
        return ipaddress.ip_address(candidate)
    except ValueError:
        return None


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, NAT64), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress) -> str | None:
    """Why a sandbox may not reach `address` by default, or None when it is public."""
    inner = embedded_ipv4(address)
    if inner is not None:
        why = refusal(inner)
        return f"{why} (inside {address})" if why else None
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if address in CGNAT:
        return "a carrier-grade NAT address (100.64.0.0/10)"
    if isinstance(address, ipaddress.IPv4Address) and address in THIS_NETWORK:
        return "a 'this network' address (0.0.0.0/8)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_private:
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "a reserved address"
    return None


def in_any(address: IPAddress, networks: tuple[Network, ...]) -> bool:
    """Whether `address` (or the IPv4 address it embeds) lies in one of `networks`."""
    inner = embedded_ipv4(address)
    return any(address in net or (inner is not None and inner in net) for net in networks)
