"""Small helpers the subcommands share."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rich.console import Console


def emit_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def age(ts: float | None) -> str:
    if ts is None:
        return "-"
    seconds = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


PIPED_WIDTH = 1_000
"""Console width when stdout is not a terminal: piped tables and trees are not
wrapped at 80 columns (each line is as wide as its content)."""


def console() -> Console:
    """A rich console that colours only on a terminal and wraps only to a terminal."""
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(highlight=False, no_color=not tty, width=None if tty else PIPED_WIDTH)
