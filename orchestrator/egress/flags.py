"""The egress flags of `warden run` and `warden exec`.

Only click, the standard library and the default caps (`caps`) are imported here:
`warden exec` keeps its start-up cheap, and pays for the proxy and the meter only when
a flag asks for egress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import click

from orchestrator.egress.caps import (
    DEFAULT_MAX_BYTES_DOWN,
    DEFAULT_MAX_BYTES_UP,
    DEFAULT_MAX_CONNECTIONS,
)

if TYPE_CHECKING:
    from orchestrator.egress.limits import EgressLimits

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class EgressFlags:
    """What `warden exec`'s egress flags asked for."""

    allow_domains: tuple[str, ...]
    deny_domains: tuple[str, ...]
    limits: EgressLimits


def egress_options(who: str, size: click.ParamType[int]) -> Callable[[F], F]:
    """`--allow-domain`, `--deny-domain` and the egress caps, worded for `who`;
    `size` parses SIZE values (`commands.exec.SizeType`)."""

    def decorate(command: F) -> F:
        for option in reversed(
            [
                click.option(
                    "--allow-domain",
                    "allow_domains",
                    multiple=True,
                    metavar="DOMAIN",
                    help=f"Let {who} reach DOMAIN through warden's egress proxy (repeatable; "
                    "'*.example.com' for subdomains, an IP or CIDR to allow addresses). "
                    "Without any, sandboxes have no network.",
                ),
                click.option(
                    "--deny-domain",
                    "deny_domains",
                    multiple=True,
                    metavar="DOMAIN",
                    help="Never let a sandbox reach DOMAIN (repeatable; deny wins).",
                ),
                click.option(
                    "--egress-max-down",
                    type=size,
                    default=None,
                    metavar="SIZE",
                    help=f"Most bytes {who} may receive through the proxy; 0: no cap "
                    f"[default: {DEFAULT_MAX_BYTES_DOWN // 1024**3}g].",
                ),
                click.option(
                    "--egress-max-up",
                    type=size,
                    default=None,
                    metavar="SIZE",
                    help=f"Most bytes {who} may send through the proxy; 0: no cap "
                    f"[default: {DEFAULT_MAX_BYTES_UP // 1024**2}m].",
                ),
                click.option(
                    "--egress-max-connections",
                    type=click.IntRange(min=0),
                    default=None,
                    metavar="N",
                    help=f"Most connections {who} may open through the proxy; 0: no cap "
                    f"[default: {DEFAULT_MAX_CONNECTIONS}].",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


def limits_from_flags(down: int | None, up: int | None, connections: int | None) -> EgressLimits:
    from orchestrator.egress.limits import EgressLimits

    values = {
        k: v
        for k, v in (
            ("max_bytes_down", down),
            ("max_bytes_up", up),
            ("max_connections", connections),
        )
        if v is not None
    }
    return EgressLimits(**values)
