"""`warden logs RUN|TASK`: a run's parent conversation, or a task's setup, events and
transcript. Container text is shown as plain text, never as markup."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

T = TypeVar("T")

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.jsontypes import JSONObject
    from orchestrator.store import Store

FOLLOW_POLL_S = 0.5
RUN_PREFIX = "run_"


@click.command("logs")
@click.argument("target_id", metavar="RUN_OR_TASK")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until it ends.")
@click.option(
    "--tail",
    "-n",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Only the last N events (and, for a task, the last N transcript messages); "
    "with --follow, the new ones after them.",
)
@click.option("--json", "json_mode", is_flag=True, help="Print events and the transcript as JSON.")
def logs(target_id: str, follow: bool, tail: int | None, json_mode: bool) -> None:
    """Show a run's parent conversation and events (RUN_ID), or a task's setup (system
    prompt, tools, model, limits), events and transcript (TASK_ID). Events have the
    shape of `warden schema events`."""
    from orchestrator.config import Settings
    from orchestrator.lifecycle.recovery import open_store

    settings = Settings.from_env()
    with open_store(settings) as store:
        if target_id.startswith(RUN_PREFIX):
            _run_logs(settings, store, target_id, follow, json_mode, tail)
        else:
            _task_logs(store, target_id, follow, json_mode, tail)


def _last(items: list[T], tail: int | None) -> list[T]:
    return items if tail is None else items[len(items) - tail :] if tail else []


def _run_logs(
    settings: Settings, store: Store, run_id: str, follow: bool, json_mode: bool, tail: int | None
) -> None:
    from orchestrator.commands._common import emit_json
    from orchestrator.results.build import stored_event
    from orchestrator.results.parent_transcript import load_parent_transcript
    from orchestrator.untrusted_text import printable

    run = store.get_run(run_id)
    transcript = load_parent_transcript(settings.state_dir, run_id)
    if json_mode and not follow:
        emit_json(
            {
                "run": run.model_dump(mode="json"),
                "parent_transcript": transcript,
                "tasks": [t.model_dump(mode="json") for t in store.list_tasks(run_id=run_id)],
                "events": [
                    stored_event(e).model_dump(mode="json")
                    for e in _last(list(store.events(run_id=run_id)), tail)
                ],
            }
        )
        return
    if not json_mode:
        click.echo(f"run {run_id} ({printable(run.status, 20)}), model {printable(run.model, 80)}")
        click.echo(f"prompt: {printable(run.prompt, None, multiline=True)}")
        if transcript is None:
            click.echo("--- no parent transcript was stored for this run ---")
        else:
            messages = transcript.get("messages")
            count = len(messages) if isinstance(messages, list) else 0
            click.echo(f"--- parent transcript ({count} messages) ---")
            if transcript.get("truncated"):
                click.echo("(the transcript grew past its size limit; later turns are not kept)")
            _print_messages(transcript.get("messages", []))
        click.echo("--- events ---")
    _print_events(store, follow, json_mode, lambda: store.get_run(run_id).status == "running",
                  run_id=run_id, tail=tail)  # fmt: skip


def _task_logs(store: Store, task_id: str, follow: bool, json_mode: bool, tail: int | None) -> None:
    from orchestrator.commands._common import emit_json
    from orchestrator.results.build import stored_event
    from orchestrator.untrusted_text import printable

    task = store.get_task(task_id)
    events = [stored_event(e) for e in store.events(task_id=task_id)]
    setup = next(
        (e.data.get("setup") for e in events if e.kind == "task_started" and e.data.get("setup")),
        None,
    )
    if json_mode and not follow:
        emit_json(
            {
                "task": task.model_dump(mode="json"),
                "setup": setup,
                "events": [e.model_dump(mode="json") for e in _last(events, tail)],
                "transcript": _last(store.get_transcript(task_id), tail),
            }
        )
        return
    if not json_mode:
        click.echo(
            f"task {task_id} ({printable(task.status, 20)}), agent {printable(task.agent_type, 80)}"
            f", run {printable(task.run_id, 80)}, parent {printable(task.parent_id or '-', 80)}"
        )
        click.echo(f"description: {printable(task.description, 200)}")
        if isinstance(setup, dict):
            _print_setup(setup)
        click.echo("--- events ---")
    _print_events(
        store,
        follow,
        json_mode,
        lambda: store.get_task(task_id).status in ("pending", "running"),
        task_id=task_id,
        tail=tail,
    )
    if not json_mode:
        click.echo(f"--- transcript ({printable(store.get_task(task_id).status, 20)}) ---")
        _print_messages(_last(store.get_transcript(task_id), tail))


def _disk_text(disk: JSONObject) -> str:
    """The disk caps of a task's setup, as `warden run --disk-write-limit` words them."""
    from orchestrator.backend.disk import size_text

    def size(key: str) -> str:
        value = disk.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            return "?"
        return "none" if value == 0 else size_text(value)

    inodes = disk.get("free_inode_floor")
    return (
        f"write limit {size('write_limit_bytes')}, free floor {size('free_floor_bytes')}, "
        f"free inode floor {inodes if inodes else 'none'}"
    )


def _print_setup(setup: JSONObject) -> None:
    from orchestrator.untrusted_text import printable

    tools = setup.get("tools")
    click.echo(f"model: {printable(setup.get('model'), 100)}")
    click.echo(
        "tools: " + (printable(", ".join(map(str, tools)), 300) if isinstance(tools, list) else "-")
    )
    servers = setup.get("mcp_servers")
    if isinstance(servers, list) and servers:
        names = []
        for server in servers:
            if not isinstance(server, dict):
                continue
            some = server.get("tools")
            only = f": {', '.join(map(str, some))}" if isinstance(some, list) else ""
            names.append(f"{server.get('name')} ({server.get('transport')}{only})")
        click.echo("MCP servers: " + printable(", ".join(names), 300))
    limits = setup.get("limits")
    if not isinstance(limits, dict):
        limits = {}
    parts = [
        f"max_turns {setup.get('max_turns')}",
        f"timeout {setup.get('timeout_s')} s",
        f"token budget {setup.get('token_budget') or 'none'}",
        *(f"{k} {v}" for k, v in limits.items()),
    ]
    click.echo(f"limits: {printable(', '.join(parts), 300)}")
    disk = setup.get("disk")
    if isinstance(disk, dict):
        click.echo(f"disk: {printable(_disk_text(disk), 300)}")
    click.echo(
        f"image: {printable(setup.get('image'), 100)}; from {printable(setup.get('source'))}"
    )
    click.echo("--- system prompt ---")
    click.echo(printable(setup.get("system_prompt", ""), None, multiline=True))


def _print_events(
    store: Store,
    follow: bool,
    json_mode: bool,
    active: Callable[[], bool],
    *,
    run_id: str | None = None,
    task_id: str | None = None,
    tail: int | None = None,
) -> None:
    from orchestrator.lifecycle.recovery import reap_dead_quietly
    from orchestrator.results.build import stored_event
    from orchestrator.untrusted_text import printable

    last = 0
    first = True
    while True:
        records = list(store.events(run_id=run_id, task_id=task_id, after_id=last))
        if first:
            if tail is not None and records:
                last = records[-1].event_id  # what is skipped is not printed later either
            records, first = _last(records, tail), False
        for record in records:
            last = record.event_id
            event = stored_event(record)
            if json_mode:
                click.echo(event.model_dump_json())
            else:
                stamp = time.strftime("%H:%M:%S", time.localtime(event.ts))
                who = (
                    f" {printable(event.task_id, 40)}"
                    if run_id is not None and event.task_id
                    else ""
                )
                click.echo(
                    f"{stamp}{who} {printable(event.kind, 40)} {printable(json.dumps(event.data), 300)}"
                )
        if not follow or not active():
            break
        time.sleep(FOLLOW_POLL_S)
        reap_dead_quietly(store)  # its orchestrator may die while we follow


def _print_messages(messages: object) -> None:
    from orchestrator.untrusted_text import printable

    for message in messages if isinstance(messages, list) else []:
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
