"""`warden ps`: the tree of runs and tasks."""

from __future__ import annotations

import click


@click.command("ps")
@click.option(
    "--all", "show_all", is_flag=True, help="Include finished runs (default: the last 10)."
)
@click.option("--json", "json_mode", is_flag=True, help="Print runs and tasks as JSON.")
def ps(show_all: bool, json_mode: bool) -> None:
    """Show runs and their tasks, as a tree, with status, agent type and age."""
    from rich.markup import escape
    from rich.tree import Tree

    from orchestrator.commands._common import age, console, emit_json, open_store
    from orchestrator.config import Settings

    store = open_store(Settings.from_env())
    with store:
        runs = store.list_runs(limit=1000 if show_all else 10)
        tasks_by_run = {r.run_id: store.list_tasks(run_id=r.run_id) for r in runs}
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
        tree = Tree(
            f"[bold]{run.run_id}[/bold]  {run.status}  {age(run.created_at)} ago  {escape(run.prompt[:60])}"
        )
        nodes = {None: tree}
        for task in sorted(tasks_by_run[run.run_id], key=lambda t: (t.depth, t.created_at)):
            parent = nodes.get(task.parent_id, tree)
            label = f"{task.task_id}  {task.agent_type}  {task.status}  {age(task.created_at)}  {escape(task.description[:50])}"
            nodes[task.task_id] = parent.add(label)
        out.print(tree)
