"""`warden logs TASK`: a task's events and transcript."""

from __future__ import annotations

import json
import time

import click

FOLLOW_POLL_S = 0.5


@click.command("logs")
@click.argument("task_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until the task ends.")
@click.option("--json", "json_mode", is_flag=True, help="Print events and the transcript as JSON.")
def logs(task_id: str, follow: bool, json_mode: bool) -> None:
    """Show TASK_ID's events and its transcript (container text is shown escaped)."""
    from orchestrator.commands._common import emit_json, open_store
    from orchestrator.config import Settings
    from orchestrator.results.build import stored_event
    from orchestrator.untrusted_text import printable

    with open_store(Settings.from_env()) as store:
        task = store.get_task(task_id)
        events = store.events(task_id=task_id)
        if json_mode and not follow:
            emit_json(
                {
                    "task": task.model_dump(mode="json"),
                    "events": [stored_event(e).model_dump(mode="json") for e in events],
                    "transcript": store.get_transcript(task_id),
                }
            )
            return
        last = 0
        while True:
            for event in events:
                last = event.event_id
                if json_mode:
                    click.echo(stored_event(event).model_dump_json())
                else:
                    stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
                    data = printable(json.dumps(event.data.get("data", event.data)), 300)
                    click.echo(f"{stamp} {printable(event.kind, 40)} {data}")
            task = store.get_task(task_id)
            if not follow or task.status not in ("pending", "running"):
                break
            time.sleep(FOLLOW_POLL_S)
            events = store.events(task_id=task_id, after_id=last)
        if not json_mode:
            click.echo(f"--- transcript ({printable(task.status, 20)}) ---")
            for message in store.get_transcript(task_id):
                if not isinstance(message, dict):
                    continue
                role = printable(message.get("role"), 40)
                for block in _blocks(message.get("content")):
                    click.echo(f"[{role}] {printable(block, None, multiline=True)}")


def _blocks(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out.append(str(block.get("text", "")))
        elif kind == "tool_use":
            out.append(f"tool_use {block.get('name')} {json.dumps(block.get('input'))}")
        elif kind == "tool_result":
            body = block.get("content")
            text = body if isinstance(body, str) else json.dumps(body)
            out.append(f"tool_result{' (error)' if block.get('is_error') else ''}: {text}")
    return out
