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
    from rich.table import Table
    from rich.text import Text

    from orchestrator.commands._common import console, emit_json, open_store
    from orchestrator.config import Settings
    from orchestrator.untrusted_text import plain, printable

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
        # Every cell is Text: tool names, inputs, agent types and hook output are
        # container or workspace text and must never be read as markup.
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(r.time)),
            plain(r.task_id or "-", 40),
            plain(r.agent_type, 40),
            plain(r.tool_name, 40),
            Text(f"{printable(r.tool_input, 80)}\n#{printable(r.input_hash, 12)}"),
            plain(r.decision, 20),
            plain(r.final, 20),
            plain(r.decided_by, 80),
        )
    console().print(table)
    if not records:
        click.echo("no tool calls were decided in this run")
