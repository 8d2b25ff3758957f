"""After a crash: find what a dead orchestrator left behind, mark it interrupted
(resumable) and remove its containers.

`reap_dead` is the one function every command that opens the store calls
(`open_store`, `session.open_run`): runs whose owner is provably
dead (`orchestrator.owner.is_dead`) become `interrupted`, and so do their tasks
that never ended, including tasks left `running` under a run that did end (the
orchestrator died, or could not write, between the two). `recover` adds the
engine: it also removes those runs' containers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator import labels, owner
from orchestrator.backend.mounts import sweep_pins
from orchestrator.errors import StoreError, WardenError
from orchestrator.lifecycle import leftovers, socket_dirs

if TYPE_CHECKING:
    from orchestrator.backend.contract import ContainerBackend
    from orchestrator.config import Settings
    from orchestrator.store import Store

log = logging.getLogger(__name__)

RUN_INTERRUPTED = "the orchestrator of this run died before it ended (crash, kill -9, reboot)"


@dataclass
class Recovery:
    runs: list[str] = field(default_factory=list)
    """Runs whose orchestrator died while they were running."""
    tasks: list[str] = field(default_factory=list)
    """Their tasks that were pending or running, now `interrupted`."""
    containers: int = 0
    """Containers of those runs that were still on the engine and are now removed."""
    socket_dirs: int = 0
    """Broker socket directories of dead owners, now removed."""
    temp_files: int = 0
    """Temporary files of interrupted Write/Edit calls in those runs' workspaces, now
    removed (`leftovers`)."""


def reap_dead(store: Store) -> Recovery:
    """Blocking, store only. Safe to call from any process at any time: a run whose
    orchestrator is alive (or cannot be checked from here) is left alone."""
    found = Recovery()
    for run in store.stale_runs(owner.run_owner_dead):
        tasks = [t.task_id for t in store.list_tasks(run_id=run.run_id) if t.status in _LIVE]
        store.mark_interrupted(tasks)
        store.finish_run(run.run_id, "interrupted", run.result or RUN_INTERRUPTED)
        found.runs.append(run.run_id)
        found.tasks.extend(tasks)
    for run in store.ended_runs_with_live_tasks(owner.run_owner_dead):
        tasks = [t.task_id for t in store.list_tasks(run_id=run.run_id) if t.status in _LIVE]
        store.mark_interrupted(tasks)
        found.tasks.extend(tasks)
    return found


def open_store(settings: Settings) -> Store:
    """The state store, with the runs of dead orchestrators marked interrupted first
    (`reap_dead_quietly`), so no command shows a dead run as `running`. Blocking."""
    from orchestrator.store import DB_FILENAME, Store

    store = Store.open(settings.state_dir / DB_FILENAME)
    found = reap_dead_quietly(store)
    if found.runs:
        _remove_containers_quietly(settings, found.runs)
        found.temp_files = _sweep_workspaces(store, found.runs)
    return store


def _sweep_workspaces(store: Store, run_ids: list[str]) -> int:
    """Remove what interrupted Write/Edit calls left in these runs' workspaces."""
    workspaces: list[str] = []
    for run_id in run_ids:
        try:
            workspaces.append(store.get_run(run_id).workspace)
        except WardenError:  # unknown or unreadable: nothing to sweep
            continue
    return leftovers.remove_quietly(workspaces)


def _remove_containers_quietly(settings: Settings, run_ids: list[str]) -> None:
    """The stopped containers of runs just found dead go with them (a SIGKILLed run's
    would otherwise wait for the next `run` or `cleanup`); an engine that does not
    answer leaves them to those, with no error for a read-only command."""
    from orchestrator.backend.connect import connect
    from orchestrator.backend.factory import make_backend

    try:
        backend = make_backend(connect(), settings)
        for run_id in run_ids:
            backend.cleanup({labels.RUN: run_id})
    except Exception as exc:  # the engine is optional here: report, never fail ps
        log.warning("could not remove the containers of crashed runs: %s", exc)


def reap_dead_quietly(store: Store) -> Recovery:
    """`reap_dead` for read-only commands: a store that cannot be written (disk
    full, read-only) still shows what it holds; the failure is one warning."""
    try:
        return reap_dead(store)
    except StoreError as exc:
        log.warning("could not mark the runs of dead orchestrators interrupted: %s", exc)
        return Recovery()


def recover(store: Store, backend: ContainerBackend, *, sweep: bool = True) -> Recovery:
    """`reap_dead`, then remove the containers of the runs it found and, with
    `sweep`, every other warden container whose owner is provably dead: a read-only
    command (`ps`, `logs`) may already have marked a dead run interrupted, and its
    containers must not outlive that; so do dead owners' broker socket directories.
    (`warden cleanup` sweeps itself, within its `--session`, and says what it
    removed.) Blocking."""
    found = reap_dead(store)
    for run_id in found.runs:
        found.containers += backend.cleanup({labels.RUN: run_id})
    found.temp_files = _sweep_workspaces(store, found.runs)  # after their sandboxes went
    if not sweep:
        return found
    found.socket_dirs = len(socket_dirs.sweep())
    sweep_pins()  # mount sources a killed warden left pinned
    for info in backend.list({labels.SESSION: None}):
        identity = owner.Owner.from_labels(info.labels)
        if identity is not None and owner.is_dead(identity):
            backend.remove(info.id)
            found.containers += 1
    return found


_LIVE = ("pending", "running")
