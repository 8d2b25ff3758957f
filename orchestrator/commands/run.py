"""`warden run`: a parent agent that delegates to sandboxed subagents."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import click


@click.command("run")
@click.argument("prompt")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default="current directory",
    help="Directory shared with every subagent at /workspace.",
)
@click.option(
    "--model", default=None, help="Model for the parent and subagents (default: claude-sonnet-5)."
)
@click.option(
    "--json", "json_mode", is_flag=True, help="Write events and the result as JSON lines on stdout."
)
@click.option(
    "--replay",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Answer model calls from this script with warden's scripted model server (offline).",
)
def run(
    prompt: str, workspace: Path, model: str | None, json_mode: bool, replay: Path | None
) -> None:
    """Run PROMPT with a parent agent whose only tool delegates to subagents."""
    from orchestrator.config import Settings

    settings = Settings.from_env()
    try:
        code = asyncio.run(_run(settings, prompt, workspace, model, json_mode, replay))
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code)


REPLAY_KEY = "warden-replay-key"
"""The key the offline scripted server expects: it proves the key reaches the model
endpoint from the host (and the tests prove it never enters a container)."""


async def model_endpoint(stack: AsyncExitStack, settings: Any, replay: Path | None) -> Any:
    """Settings pointing at the model: the scripted server for --replay, else the env's."""
    if replay is not None:
        from orchestrator.scripted import Script, ScriptedModelServer

        server = ScriptedModelServer(Script.load(replay), expected_api_key=REPLAY_KEY)
        await stack.enter_async_context(server)
        from pydantic import SecretStr

        return settings.model_copy(
            update={
                "anthropic_base_url": server.base_url,
                "anthropic_api_key": SecretStr(REPLAY_KEY),
            }
        )
    if settings.anthropic_api_key is None:
        raise click.UsageError(
            "ANTHROPIC_API_KEY is not set: set it (and ANTHROPIC_BASE_URL for another "
            "Anthropic-compatible endpoint), or run offline with --replay SCRIPT"
        )
    return settings


async def _run(
    settings: Any,
    prompt: str,
    workspace: Path,
    model: str | None,
    json_mode: bool,
    replay: Path | None,
) -> int:
    from orchestrator.progress import Progress, printable
    from orchestrator.session import open_run

    async with AsyncExitStack() as stack:
        settings = await model_endpoint(stack, settings, replay)
        the_run = await stack.enter_async_context(
            open_run(settings, workspace=workspace, prompt=prompt, model=model)
        )
        # Warm the built-in agents' sandboxes while the parent's first model call runs.
        the_run.manager.prewarm("general-purpose", "bash")
        progress = stack.enter_context(Progress(json_mode=json_mode))
        the_run.events.listeners.append(progress)
        status, text = "failed", ""
        try:
            result = await the_run.parent.run(prompt)
            status, text = "completed", result.text
        except asyncio.CancelledError:
            # Ctrl-C: stop everything this run started, say so, keep what was written.
            status = "stopped"
            await asyncio.shield(the_run.manager.close())
            stopped = [c.task_id for c in the_run.manager.tasks.values() if c.status == "stopped"]
            click.echo(
                f"interrupted: stopped {len(stopped)} subagent(s) {' '.join(stopped)}; "
                f"their transcripts are kept (warden ps, warden logs TASK)",
                err=True,
            )
            raise
        finally:
            await asyncio.to_thread(the_run.store.finish_run, the_run.run_id, status, text or None)
        if json_mode:
            print(
                json.dumps(
                    {
                        "type": "result",
                        "run_id": the_run.run_id,
                        "status": status,
                        "result": text,
                        "tasks": [r.model_dump(mode="json") for r in result.tasks],
                    }
                )
            )
        else:
            print(printable(text, limit=None, multiline=True))
            click.echo(f"run {the_run.run_id}; events: {the_run.events_path}", err=True)
        return 0
