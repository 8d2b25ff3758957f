"""`warden stop TASK`: kill a task's container and its descendants'."""

from __future__ import annotations

import os

import click


@click.command("stop")
@click.argument("task_id")
def stop(task_id: str) -> None:
    """Stop TASK_ID and every subagent it started. The orchestrator that runs
    them records them as stopped; their transcripts so far are kept."""
    from orchestrator import labels
    from orchestrator.backend.connect import connect
    from orchestrator.backend.factory import make_backend
    from orchestrator.config import Settings
    from orchestrator.lifecycle.recovery import open_store

    settings = Settings.from_env()
    with open_store(settings) as store:
        task = store.get_task(task_id)
        targets = [task, *store.descendants(task_id)]
        live = [t for t in targets if t.status in ("pending", "running")]
        if not live:
            click.echo(f"{task_id} is not running (status: {task.status}); nothing to stop")
            return
        backend = make_backend(connect(), settings)
        for t in live:
            # Recorded first, so the orchestrator that runs it sees a stop, not a kill
            # from outside warden.
            store.append_event(
                t.run_id,
                t.task_id,
                "task_stop_requested",
                {"by": "warden stop", "pid": os.getpid()},
            )
            # A task that took a warm sandbox has no task label: its id is in the store,
            # read again now: a task starting meanwhile either records its container
            # before it checks for this stop (then it is read here) or sees the stop.
            ids = {info.id for info in backend.list({labels.TASK: t.task_id})}
            if container_id := store.get_task(t.task_id).container_id:
                ids.add(container_id)
            for container_id in ids:
                backend.kill(container_id)
        click.echo(f"stopped {len(live)} task(s): {', '.join(t.task_id for t in live)}")
