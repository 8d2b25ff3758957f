"""`warden ps`: the tree of runs and tasks, with Docker's `-a`, `-q` and `--format`.

`--format` takes Docker's placeholder spelling (`{{.ID}}`) for the fields in
`FORMAT_FIELDS`, and nothing else of Go's template language: a substitution, so no
template engine (jinja2's `{{ x }}` would not read Docker's `{{.ID}}`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from orchestrator.jsontypes import JSONObject
    from orchestrator.store import RunRecord, Store, TaskRecord

FORMAT_FIELDS = ("ID", "Status", "Age", "Tasks", "Model", "Workspace", "Prompt")
"""What `--format` can name: `{{.ID}}`, `{{.Status}}`, …"""
MAX_FIELD_CHARS = 200
"""Longest value one placeholder prints (container or user text is cut, marked `…`)."""
_PLACEHOLDER = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


@click.command("ps")
@click.option(
    "-a", "--all", "show_all", is_flag=True, help="Show up to 1000 runs (default: the last 10)."
)
@click.option("-q", "--quiet", is_flag=True, help="Print only run ids, one per line.")
@click.option(
    "--format",
    "fmt",
    default=None,
    metavar="TEMPLATE",
    help="Print each run with TEMPLATE, e.g. '{{.ID}} {{.Status}}' (fields: "
    + ", ".join(FORMAT_FIELDS)
    + "), or `json`: one JSON object per line.",
)
@click.option("--json", "json_mode", is_flag=True, help="Print runs and tasks as JSON.")
@click.option(
    "--pending",
    is_flag=True,
    help="List the change sets of isolated subagents (isolation: worktree) that wait for "
    "warden apply TASK or warden discard TASK, instead of runs.",
)
def ps(show_all: bool, quiet: bool, fmt: str | None, json_mode: bool, pending: bool) -> None:
    """Show runs and their tasks, as a tree, with status, agent type and age."""
    if pending:
        from orchestrator.commands.apply import list_pending

        list_pending(json_mode)
        return
    from rich.text import Text
    from rich.tree import Tree

    from orchestrator.commands._common import age, console, emit_json
    from orchestrator.config import Settings
    from orchestrator.lifecycle.recovery import open_store
    from orchestrator.results.todos import todo_count, todo_lines
    from orchestrator.untrusted_text import printable

    if fmt is not None and fmt != "json":
        unknown = sorted(set(_PLACEHOLDER.findall(fmt)) - set(FORMAT_FIELDS))
        if unknown:
            raise click.BadParameter(
                f"unknown field(s) {', '.join(unknown)}; use {', '.join(FORMAT_FIELDS)}",
                param_hint="--format",
            )
    store = open_store(Settings.from_env())
    with store:
        runs = store.list_runs(limit=1000 if show_all else 10)
        tasks_by_run = {r.run_id: store.list_tasks(run_id=r.run_id) for r in runs}
        todos = {} if quiet or fmt or json_mode else _latest_todos(store, runs)
    if quiet:
        for run in runs:
            click.echo(run.run_id)
        return
    if fmt == "json":
        import json

        for run in runs:
            doc = {**run.model_dump(mode="json"), "tasks": len(tasks_by_run[run.run_id])}
            click.echo(json.dumps(doc))
        return
    if fmt is not None:
        for run in runs:
            click.echo(render(fmt, run, tasks_by_run[run.run_id]))
        return
    if json_mode:
        emit_json(
            [
                {
                    **r.model_dump(mode="json"),
                    "tasks": [t.model_dump(mode="json") for t in tasks_by_run[r.run_id]],
                }
                for r in runs
            ]
        )
        return
    out = console()
    if not runs:
        out.print("no runs yet")
        return
    for run in runs:
        # Text, never markup strings: agent types, descriptions and prompts may
        # come from a container or a workspace file.
        tree = Tree(
            Text.assemble(
                (printable(run.run_id, 40), "bold"),
                f"  {printable(run.status, 20)}  {age(run.created_at)} ago  ",
                printable(run.prompt, 60),
            )
        )
        nodes: dict[str | None, Tree] = {None: tree}
        for task in sorted(tasks_by_run[run.run_id], key=lambda t: (t.depth, t.created_at)):
            parent = nodes.get(task.parent_id, tree)
            label = Text(
                f"{printable(task.task_id, 40)}  {printable(task.agent_type, 40)}  "
                f"{printable(task.status, 20)}  {age(task.created_at)}  {task.tokens} tok  "
                f"{printable(task.description, 50)}"
            )
            node = nodes[task.task_id] = parent.add(label)
            listed = todos.get(task.task_id)
            if listed is not None:
                node.add(Text(f"todos {printable(todo_count(listed), 20)}", style="dim"))
                for line in todo_lines(listed, limit=5):
                    node.add(Text(printable(line, 100), style="dim"))
        out.print(tree)


def _latest_todos(store: Store, runs: list[RunRecord]) -> dict[str, JSONObject]:
    """Each task's latest todo list (`TodoWrite`), by task id."""
    from orchestrator.results.build import stored_event
    from orchestrator.results.todos import TODOS_EVENT

    latest: dict[str, JSONObject] = {}
    for run in runs:
        for record in store.events(run_id=run.run_id):
            if record.kind == TODOS_EVENT and record.task_id is not None:
                latest[record.task_id] = dict(stored_event(record).data)
    return latest


def render(template: str, run: RunRecord, tasks: list[TaskRecord]) -> str:
    """One line of `--format`: each placeholder replaced by its field as plain text."""
    from orchestrator.commands._common import age
    from orchestrator.untrusted_text import printable

    values = {
        "ID": run.run_id,
        "Status": run.status,
        "Age": age(run.created_at),
        "Tasks": str(len(tasks)),
        "Model": run.model,
        "Workspace": run.workspace,
        "Prompt": run.prompt,
    }
    return _PLACEHOLDER.sub(lambda m: printable(values[m.group(1)], MAX_FIELD_CHARS), template)
