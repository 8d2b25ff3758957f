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
    from rich.text import Text
    from rich.tree import Tree

    from orchestrator.commands._common import age, console, emit_json
    from orchestrator.config import Settings
    from orchestrator.lifecycle.recovery import open_store
    from orchestrator.ui.untrusted_text import printable

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
            nodes[task.task_id] = parent.add(label)
        out.print(tree)
