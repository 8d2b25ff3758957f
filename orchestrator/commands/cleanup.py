"""`warden cleanup`: remove containers warden left behind (e.g. after a crash)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from orchestrator.backend.base import ContainerBackend


def remove_orphans(
    backend: ContainerBackend, session: str | None = None, keep_runs: frozenset[str] = frozenset()
) -> list[str]:
    """Remove every container labelled `warden.session` or `warden.exec`
    (only that session's when `session` is given), except those of the runs in
    `keep_runs`; return their ids."""
    from orchestrator import labels

    if session is not None:
        selectors: list[dict[str, str | None]] = [{labels.SESSION: session}]
    else:
        selectors = [{labels.SESSION: None}, {labels.EXEC: None}]
    found: dict[str, None] = {}
    for selector in selectors:
        for info in backend.list(selector):
            if info.labels.get(labels.RUN) not in keep_runs:
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
@click.option(
    "--all", "include_live", is_flag=True, help="Also remove containers of runs still in progress."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cleanup(session: str | None, include_live: bool, as_json: bool) -> None:
    """Remove the containers warden left behind (labelled warden.session or
    warden.exec, running or not) and say how many. Runs whose orchestrator died
    are marked interrupted (resumable). Containers of runs whose orchestrator is
    still alive are kept unless --all is given."""
    from orchestrator.backend.docker import DockerBackend
    from orchestrator.config import Settings
    from orchestrator.engine import connect
    from orchestrator.recovery import recover
    from orchestrator.store import Store

    settings = Settings.from_env()
    backend = DockerBackend(connect(), settings)
    live: frozenset[str] = frozenset()
    interrupted: list[str] = []
    db = settings.state_dir / "warden.db"
    if db.exists():
        with Store.open(db) as store:
            interrupted = recover(store, backend).tasks
            if not include_live:
                live = frozenset(
                    r.run_id for r in store.list_runs(limit=1000) if r.status == "running"
                )
    removed = remove_orphans(backend, session, keep_runs=live)
    if as_json:
        click.echo(
            json.dumps({"removed": len(removed), "ids": removed, "interrupted_tasks": interrupted})
        )
    else:
        noun = "container" if len(removed) == 1 else "containers"
        click.echo(f"removed {len(removed)} warden {noun}")
        if interrupted:
            click.echo(f"marked {len(interrupted)} task(s) of crashed runs interrupted (resumable)")
        if live:
            click.echo(
                f"kept the containers of {len(live)} run(s) in progress (--all removes them)"
            )
