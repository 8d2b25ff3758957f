"""Small helpers the subcommands share."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from orchestrator.config import Settings


TRUST_FLAG_HELP = (
    "Describe the run as `warden run --trust-workspace` would make it: the workspace's "
    "own agent files, settings and dev container as if trusted now."
)


def described_trust(workspace: Path, flag: bool) -> tuple[Settings, bool, str]:
    """(settings, trusted, why) for a command that describes what a run in `workspace`
    would do (`doctor`, `agents list/show`): the same answer `warden run` starts from
    (`--trust-workspace`, WARDEN_TRUST_WORKSPACE, else the trust record), without
    asking anyone."""
    from orchestrator.config import Settings
    from orchestrator.workspace.trust import verdict

    settings = Settings.from_env()
    if flag:
        settings = replace(settings, trust_workspace=True)
    found = verdict(settings, workspace)
    return settings, found.trusted, found.reason


def untrusted_note(workspace: Path, why: str) -> str:
    """What a describing command says of an untrusted workspace."""
    return (
        f"{workspace} is not trusted ({why}): shown as `warden run` would run it, without "
        "the workspace's own agent files, allow rules and dev container; --trust-workspace "
        "shows it as trusted (`warden trust` records a yes)"
    )


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
