"""`python -m orchestrator.scripted SCRIPT [--port N] [--record FILE]`: serve a script
on 127.0.0.1 until interrupted."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click

from orchestrator.scripted.script import Script, ScriptError
from orchestrator.scripted.server import ScriptedModelServer


async def _serve(server: ScriptedModelServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        click.echo(f"scripted model server listening on {server.base_url}")
        click.echo(f"  export ANTHROPIC_BASE_URL={server.base_url}")
        await stop.wait()
    click.echo(f"served {len(server.requests)} requests")


@click.command()
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="0 picks a free port.")
@click.option(
    "--record",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append every request (API key redacted) to this JSONL file.",
)
@click.option("--api-key", default=None, help="Answer 401 to requests without this key.")
def main(script: Path, port: int, record: Path | None, api_key: str | None) -> None:
    """Serve SCRIPT as an Anthropic-compatible Messages API on 127.0.0.1."""
    try:
        loaded = Script.load(script)
    except ScriptError as exc:
        raise click.ClickException(str(exc)) from exc
    server = ScriptedModelServer(loaded, expected_api_key=api_key, record_path=record, port=port)
    asyncio.run(_serve(server))


if __name__ == "__main__":
    main()
