"""`warden resume SESSION INSTRUCTION`: continue a subagent's conversation."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import click


@click.command("resume")
@click.argument("session_id")
@click.argument("instruction")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Workspace (default: the one the session ran in).",
)
@click.option("--model", default=None, help="Model (default: the session's run's model).")
@click.option(
    "--json", "json_mode", is_flag=True, help="Print events and the result as JSON lines."
)
@click.option(
    "--replay",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Answer model calls from this script (offline).",
)
def resume(
    session_id: str,
    instruction: str,
    workspace: Path | None,
    model: str | None,
    json_mode: bool,
    replay: Path | None,
) -> None:
    """Send INSTRUCTION to subagent session SESSION_ID, which continues with its full
    history in a new container (also after an orchestrator crash)."""
    from orchestrator.config import Settings
    from orchestrator.lifecycle.interrupts import run_stoppable

    # SIGINT, SIGTERM and SIGHUP stop it cleanly, as for `warden run`.
    sys.exit(
        run_stoppable(
            _resume(
                Settings.from_env(), session_id, instruction, workspace, model, json_mode, replay
            )
        )
    )


async def _resume(
    settings: Any,
    session_id: str,
    instruction: str,
    workspace: Path | None,
    model: str | None,
    json_mode: bool,
    replay: Path | None,
) -> int:
    from orchestrator.commands._common import open_store
    from orchestrator.commands.run import make_approver, model_endpoint
    from orchestrator.runtime.session import open_run
    from orchestrator.runtime.tasks import TaskInput
    from orchestrator.ui.progress import Progress, printable

    with open_store(settings) as store:
        tasks = store.list_tasks(session_id=session_id)
        if not tasks:
            raise click.UsageError(f"no subagent session {session_id!r}; `warden ps` lists them")
        last = tasks[-1]  # creation order: the session's latest task
        run = store.get_run(last.run_id)
    async with AsyncExitStack() as stack:
        settings = await model_endpoint(stack, settings, replay)
        progress = Progress(json_mode=json_mode)
        the_run = await stack.enter_async_context(
            open_run(
                settings,
                workspace=workspace or Path(run.workspace),
                prompt=instruction,
                model=model or run.model,
                # The same approver `warden run` would use: a human on a terminal.
                approver=make_approver(settings, progress, None),
            )
        )
        stack.enter_context(progress)
        the_run.events.listeners.append(progress)
        status, text = "failed", None
        try:
            result = await the_run.manager.run_task(
                TaskInput(
                    description=f"resume {session_id}"[:200],
                    prompt=instruction,
                    subagent_type=last.agent_type,
                    session_id=session_id,
                )
            )
            status = "completed" if not result.is_error else "failed"
            text = result.render()
        except asyncio.CancelledError:
            # A stop signal (the task's own end is recorded as stopped), or the run
            # could no longer record what it does (`events.failure`).
            status = "failed" if the_run.events.failure else "stopped"
            await asyncio.shield(the_run.manager.close())
            if the_run.events.failure is not None:
                raise the_run.events.failure from None
            click.echo("interrupted: the resumed subagent was stopped", err=True)
            raise
        finally:
            await asyncio.to_thread(the_run.store.finish_run, the_run.run_id, status, text)
        if json_mode:
            print(json.dumps({"type": "result", **result.model_dump(mode="json")}))
        else:
            print(printable(result.render(), None, multiline=True))
        return 0 if not result.is_error else 1
