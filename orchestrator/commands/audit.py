"""`warden audit [RUN]`: every permission decision of a run."""

from __future__ import annotations

import time

import click


@click.command("audit")
@click.argument("run_id", required=False)
@click.option("--json", "json_mode", is_flag=True, help="Print the records as JSON.")
def audit(run_id: str | None, json_mode: bool) -> None:
    """List the permission decisions of RUN_ID (default: the latest run): what was
    asked, what the policy decided, what was answered, by which rule, hook, mode or
    person. Tool inputs are shown escaped; each is bound to its hash."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.commands._common import console, emit_json, open_store
    from orchestrator.config import Settings
    from orchestrator.progress import printable

    with open_store(Settings.from_env()) as store:
        if run_id is None:
            runs = store.list_runs(limit=1)
            if not runs:
                raise click.UsageError("no runs yet; `warden run` records decisions here")
            run_id = runs[0].run_id
        store.get_run(run_id)  # a clear error for an unknown run
        records = store.audit(run_id)
    if json_mode:
        emit_json([r.model_dump(mode="json") for r in records])
        return
    table = Table(title=f"audit of {run_id}")
    for column in ("time", "task", "agent", "tool", "input", "policy", "final", "decided by"):
        table.add_column(column, overflow="fold")
    for r in records:
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(r.time)),
            r.task_id or "-",
            r.agent_type,
            r.tool_name,
            escape(printable(str(r.tool_input), 80)) + f"\n#{r.input_hash[:12]}",
            r.decision,
            r.final,
            escape(printable(r.decided_by, 80)),
        )
    console().print(table)
    if not records:
        click.echo("no tool calls were decided in this run")
