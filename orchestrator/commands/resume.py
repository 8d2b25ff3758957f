"""`warden resume SESSION INSTRUCTION`: continue a subagent's conversation.

It ends exactly as `warden run` does (`commands._frame`): the same exit codes, one
`--json` result document (also on errors), `--fail-on`, `--junit`, `--audit-out`
and the summary table; the resumed task is the run's one task."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.commands._frame import (
    OutputFormat,
    approver_option,
    drive,
    outcome_options,
    run_to_end,
)
from orchestrator.commands._page import page_from_flags, page_options
from orchestrator.exit_codes import Outcome
from orchestrator.results.output_files import at_start
from orchestrator.results.report import RunOutputs, RunState

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.permissions.approvers import Approver
    from orchestrator.runtime.session import Run
    from orchestrator.web.guard import ListenConfig


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
@approver_option
@page_options
@outcome_options("the resumed task")
def resume(
    session_id: str,
    instruction: str,
    workspace: Path | None,
    model: str | None,
    approvers: tuple[str, ...],
    ui: bool,
    ui_listen: str,
    ui_tls_cert: Path | None,
    ui_tls_key: Path | None,
    ui_host_name: tuple[str, ...],
    output: OutputFormat,
    replay: Path | None,
    fail_on: tuple[Outcome, ...],
    junit_path: Path | None,
    audit_out: Path | None,
) -> None:
    """Send INSTRUCTION to subagent session SESSION_ID, which continues with its full
    history in a new container (also after an orchestrator crash). Exit codes and
    outputs are those of `warden run`."""
    from orchestrator.config import Settings

    page = page_from_flags(ui, ui_listen, ui_tls_cert, ui_tls_key, ui_host_name)
    settings = Settings.from_env()
    outputs = RunOutputs(
        json_mode=output != "text",
        fail_on=fail_on,
        junit=at_start(junit_path, "--junit"),
        audit=at_start(audit_out, "--audit-out"),
    )
    run_to_end(
        settings,
        outputs,
        lambda state: _resume(
            settings,
            state,
            session_id,
            instruction,
            workspace,
            model,
            output,
            replay,
            approvers,
            page,
        ),
    )


async def _resume(
    settings: Settings,
    state: RunState,
    session_id: str,
    instruction: str,
    workspace: Path | None,
    model: str | None,
    output: OutputFormat,
    replay: Path | None,
    approvers: tuple[str, ...] = (),
    page: ListenConfig | None = None,
) -> int:
    from orchestrator import start_up_done
    from orchestrator.broker.client import import_in_background
    from orchestrator.lifecycle.recovery import open_store
    from orchestrator.runtime.session import open_run
    from orchestrator.runtime.tasks import TaskInput, TaskStatus

    # The run's modules are imported; the model SDK's import goes on in the background.
    import_in_background()
    start_up_done()

    with open_store(settings) as store:
        tasks = store.list_tasks(session_id=session_id)
        if not tasks:
            raise click.UsageError(f"no subagent session {session_id!r}; `warden ps` lists them")
        last = tasks[-1]  # creation order: the session's latest task
        run = store.get_run(last.run_id)

    def opened(settings: Settings, approver: Approver) -> AbstractAsyncContextManager[Run]:
        return open_run(
            settings,
            workspace=workspace or Path(run.workspace),
            prompt=instruction,
            model=model or run.model,
            approver=approver,
        )

    async def work(the_run: Run) -> str:
        # The task's own outcome (failed, timed out) is a task status, as a subagent's
        # is under `warden run`: it counts for `--fail-on`, not as a run error. The
        # result is its answer, or what became of it.
        result = await the_run.manager.run_task(
            TaskInput(
                description=f"resume {session_id}"[:200],
                prompt=instruction,
                subagent_type=last.agent_type,
                session_id=session_id,
            )
        )
        return result.text if result.status is TaskStatus.COMPLETED else result.render()

    return await drive(
        settings,
        state,
        output=output,
        replay=replay,
        approval_timeout=None,
        open_run=opened,
        work=work,
        approvers=approvers,
        page=page,
    )
