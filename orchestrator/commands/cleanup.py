"""`warden cleanup`: remove containers warden left behind (e.g. after a crash).

Engines are shared (several users, CI jobs, state dirs), so a container is removed
only when its owner, named by its `warden.owner.*` labels, is provably dead
(`orchestrator.owner.is_dead`). Containers of live owners, of owners this machine
cannot check (another host or pid namespace) and of older wardens (no owner labels)
are kept unless `--all` is given; `--all` first lists what it will remove, then asks
on a terminal, and needs `--yes` when nobody can answer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from pathlib import Path

    from orchestrator.apply.prune import Pruned
    from orchestrator.backend.contract import ContainerBackend, ContainerInfo


@dataclass
class CleanupPlan:
    """Which containers go and which stay, and why (a decision is a value)."""

    remove: list[ContainerInfo] = field(default_factory=list)
    keep_live: list[ContainerInfo] = field(default_factory=list)
    """Their owner is alive."""
    keep_unknown: list[ContainerInfo] = field(default_factory=list)
    """Their owner cannot be checked from here (another host, pid namespace, old warden)."""


def plan_cleanup(
    backend: ContainerBackend, session: str | None = None, include_live: bool = False
) -> CleanupPlan:
    """Every container labelled `warden.session` or `warden.exec` (only that session's
    when `session` is given), sorted by what may be removed."""
    from orchestrator import labels, owner

    if session is not None:
        selectors: list[dict[str, str | None]] = [{labels.SESSION: session}]
    else:
        selectors = [{labels.SESSION: None}, {labels.EXEC: None}]
    found: dict[str, ContainerInfo] = {}
    for selector in selectors:
        for info in backend.list(selector):
            found.setdefault(info.id, info)
    plan = CleanupPlan()
    for info in found.values():
        identity = owner.Owner.from_labels(info.labels)
        if include_live or (identity is not None and owner.is_dead(identity)):
            plan.remove.append(info)
        elif identity is None or owner.host_id() != identity.host:
            plan.keep_unknown.append(info)
        else:
            plan.keep_live.append(info)
    return plan


def remove_orphans(
    backend: ContainerBackend, session: str | None = None, include_live: bool = False
) -> list[str]:
    """Remove the containers `plan_cleanup` allows; return their ids."""
    plan = plan_cleanup(backend, session, include_live)
    for info in plan.remove:
        backend.remove(info.id)
    return [info.id for info in plan.remove]


def _describe(info: ContainerInfo) -> str:
    from orchestrator import labels

    owner_pid = info.labels.get(labels.OWNER_PID, "?")
    session = info.labels.get(labels.SESSION) or info.labels.get(labels.EXEC) or "-"
    return f"  {info.id[:12]}  {info.status:<8} session {session}  owner pid {owner_pid}"


@click.command("cleanup")
@click.option(
    "--session",
    default=None,
    help="Only containers of this warden.session (default: every warden container).",
)
@click.option(
    "--all",
    "include_live",
    is_flag=True,
    help="Also remove containers whose owner is alive or cannot be checked (lists them "
    "and asks first).",
)
@click.option("--yes", is_flag=True, help="With --all: do not ask (needed without a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cleanup(session: str | None, include_live: bool, yes: bool, as_json: bool) -> None:
    """Remove the containers warden left behind (labelled warden.session or
    warden.exec, running or not) whose owning warden process is provably dead, and
    say how many; also the broker socket directories (in the temp dir) of dead
    warden processes. Runs of this state dir whose orchestrator died are marked
    interrupted (resumable). Working copies (isolation: worktree) of dead runs are
    settled, and the content store is pruned of what no kept change set or held
    record names (never while a run or an apply writes to it). Containers of live
    owners, including other users' and other state dirs' runs on a shared engine,
    are kept unless --all is given."""
    from orchestrator.backend.connect import connect
    from orchestrator.backend.factory import make_backend
    from orchestrator.config import Settings
    from orchestrator.lifecycle import socket_dirs
    from orchestrator.lifecycle.recovery import recover
    from orchestrator.store import Store

    settings = Settings.from_env()
    backend = make_backend(connect(), settings)
    interrupted: list[str] = []
    recovered = 0  # containers of crashed runs that the recovery step removed
    db = settings.state_dir / "warden.db"
    if db.exists():
        with Store.open(db) as store:
            recovery = recover(store, backend, sweep=False)
            interrupted, recovered = recovery.tasks, recovery.containers
    plan = plan_cleanup(backend, session, include_live)
    if include_live and plan.remove:
        _confirm(plan.remove, yes, as_json)
    for info in plan.remove:
        backend.remove(info.id)
    removed = [info.id for info in plan.remove]
    kept = len(plan.keep_live) + len(plan.keep_unknown)
    sockets = socket_dirs.sweep()  # a dead owner's only: never a live run's sockets
    from orchestrator.backend.mounts import sweep_pins

    sweep_pins()  # mount sources a killed warden left pinned (a dead owner's only)
    from orchestrator.apply.pending import settle_leftovers

    copies_removed, copies_kept = settle_leftovers(settings.state_dir)
    pruned = _prune(settings.state_dir)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "removed": len(removed) + recovered,
                    "ids": removed,
                    "removed_with_crashed_runs": recovered,
                    "kept_live": len(plan.keep_live),
                    "kept_unknown_owner": len(plan.keep_unknown),
                    "interrupted_tasks": interrupted,
                    "socket_dirs_removed": len(sockets),
                    "working_copies_removed": copies_removed,
                    "change_sets_waiting": copies_kept,
                    "content_removed": len(pruned.removed),
                    "content_bytes_freed": pruned.freed_bytes,
                    "content_store_busy": pruned.busy,
                }
            )
        )
        return
    total = len(removed) + recovered
    noun = "container" if total == 1 else "containers"
    click.echo(f"removed {total} warden {noun}")
    if sockets:
        click.echo(f"removed {len(sockets)} broker socket dir(s) of dead warden processes")
    if copies_removed:
        click.echo(f"removed {len(copies_removed)} unchanged working copy(ies) of dead runs")
    if copies_kept:
        click.echo(
            f"kept {len(copies_kept)} change set(s) of dead runs waiting: warden ps --pending, "
            "then warden apply TASK or warden discard TASK"
        )
    if pruned.removed:
        click.echo(
            f"removed {len(pruned.removed)} content store entr(ies) no change set refers to "
            f"({pruned.freed_bytes} bytes)"
        )
    if pruned.busy:
        click.echo("the content store is being written (a run or an apply): not pruned this time")
    if interrupted:
        click.echo(f"marked {len(interrupted)} task(s) of crashed runs interrupted (resumable)")
    if kept:
        click.echo(
            f"kept {kept} container(s) whose owner is alive ({len(plan.keep_live)}) or cannot "
            f"be checked from here ({len(plan.keep_unknown)}); --all removes them"
        )


def _prune(state_dir: Path) -> Pruned:
    """The content store pruned of what no change set or held record names; a record
    that cannot be read stops it (said on stderr; nothing removed)."""
    from orchestrator.apply.prune import Pruned, PruneError, prune_store

    try:
        return prune_store(state_dir)
    except PruneError as exc:
        click.echo(f"warden: {exc}", err=True)
        return Pruned()


def _confirm(doomed: list[ContainerInfo], yes: bool, as_json: bool) -> None:
    lines = [f"--all will remove {len(doomed)} container(s), live runs included:"]
    lines += [_describe(info) for info in doomed]
    click.echo("\n".join(lines), err=True)
    if yes:
        return
    if as_json or not sys.stdin.isatty():
        raise click.UsageError(
            "--all removes containers that may belong to live runs (listed above); "
            "pass --yes to confirm without a terminal"
        )
    click.confirm("remove them?", abort=True, err=True)
