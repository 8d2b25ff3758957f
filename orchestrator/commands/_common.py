"""Small helpers the subcommands share."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click


def open_store(settings: Any) -> Any:
    from orchestrator.store import Store

    return Store.open(settings.state_dir / "warden.db")


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def age(ts: float | None) -> str:
    if ts is None:
        return "-"
    seconds = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def console() -> Any:
    """A rich console that colours only on a terminal."""
    from rich.console import Console

    return Console(highlight=False, no_color=not sys.stdout.isatty())
