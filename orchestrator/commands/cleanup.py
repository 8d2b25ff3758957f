"""`warden cleanup`: remove containers warden left behind (e.g. after a crash)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from orchestrator.backend.base import ContainerBackend


def remove_orphans(backend: ContainerBackend, session: str | None = None) -> list[str]:
    """Remove every container labelled `warden.session` or `warden.exec`
    (only that session's when `session` is given); return their ids."""
    from orchestrator import labels

    if session is not None:
        selectors: list[dict[str, str | None]] = [{labels.SESSION: session}]
    else:
        selectors = [{labels.SESSION: None}, {labels.EXEC: None}]
    found: dict[str, None] = {}
    for selector in selectors:
        for info in backend.list(selector):
            found.setdefault(info.id)
    for container_id in found:
        backend.remove(container_id)
    return list(found)


@click.command("cleanup")
@click.option(
    "--session",
    default=None,
    help="Only containers of this warden.session (default: every warden container).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cleanup(session: str | None, as_json: bool) -> None:
    """Remove every container labelled warden.session or warden.exec (running or
    not) and say how many."""
    from orchestrator.backend.docker import DockerBackend
    from orchestrator.config import Settings
    from orchestrator.engine import connect

    removed = remove_orphans(DockerBackend(connect(), Settings.from_env()), session)
    if as_json:
        click.echo(json.dumps({"removed": len(removed), "ids": removed}))
    else:
        noun = "container" if len(removed) == 1 else "containers"
        click.echo(f"removed {len(removed)} warden {noun}")
