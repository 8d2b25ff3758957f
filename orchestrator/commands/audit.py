"""`warden audit [RUN]`: every permission decision of a run."""

from __future__ import annotations

import json
import time
from typing import get_args

import click

from orchestrator.behavior import Behavior


@click.command("audit")
@click.argument("run_id", required=False)
@click.option("--json", "json_mode", is_flag=True, help="Print the records as JSON.")
@click.option("--task", "task_id", default=None, metavar="TASK", help="Only this task's calls.")
@click.option(
    "--decision",
    type=click.Choice(get_args(Behavior)),
    default=None,
    help="Only calls with this outcome (allow/deny: the final answer; ask: the policy asked).",
)
@click.option("--tool", default=None, metavar="NAME", help="Only calls of this tool, e.g. Bash.")
def audit(
    run_id: str | None,
    json_mode: bool,
    task_id: str | None,
    decision: str | None,
    tool: str | None,
) -> None:
    """List the permission decisions of RUN_ID (default: the run of --task, else the
    latest run): what was
    asked, what the policy decided, what was answered, by which rule, hook, mode or
    person. Tool inputs are shown escaped; each is bound to its hash."""
    from rich.table import Table
    from rich.text import Text

    from orchestrator.commands._common import console, emit_json
    from orchestrator.config import Settings
    from orchestrator.lifecycle.recovery import open_store
    from orchestrator.untrusted_text import plain, printable

    with open_store(Settings.from_env()) as store:
        if run_id is None and task_id is not None:
            run_id = store.get_task(task_id).run_id  # the task's run, not the latest
        if run_id is None:
            runs = store.list_runs(limit=1)
            if not runs:
                raise click.UsageError("no runs yet; `warden run` records decisions here")
            run_id = runs[0].run_id
        store.get_run(run_id)  # a clear error for an unknown run
        records = [
            r
            for r in store.audit(run_id)
            if (task_id is None or r.task_id == task_id)
            and (tool is None or r.tool_name == tool)
            and (
                decision is None
                or (r.decision == "ask" if decision == "ask" else r.final == decision)
            )
        ]
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
            Text(
                f"{printable(json.dumps(r.tool_input, ensure_ascii=False), 200)}\n"
                f"#{printable(r.input_hash, 12)}"
            ),
            plain(r.decision, 20),
            plain(r.final, 20),
            plain(r.decided_by, 80),
        )
    console().print(table)
    if not records:
        click.echo(
            "no tool calls matched"
            if task_id or tool or decision
            else "no tool calls were decided in this run"
        )
