"""`warden ui`: the web page for the runs of the state dir, going or finished."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.commands._page import listen_config, listen_options

if TYPE_CHECKING:
    from orchestrator.store import Store
    from orchestrator.web.guard import ListenConfig


@click.command("ui")
@click.argument("run_id", required=False)
@listen_options
def ui(
    run_id: str | None,
    ui_listen: str,
    ui_tls_cert: Path | None,
    ui_tls_key: Path | None,
    ui_host_name: tuple[str, ...],
) -> None:
    """Serve the web page for the runs in the state dir (or just RUN_ID) until Ctrl-C:
    task trees, events, transcripts and audits, read from the store and never
    changed. A live run started with `--ui` shows its questions here too, and an
    answer given here is settled by that run (through its private socket, as if
    given on its own page). The link, printed once, is the page's key."""
    from orchestrator.config import Settings
    from orchestrator.store import DB_FILENAME, Store

    listen = listen_config(ui_listen, ui_tls_cert, ui_tls_key, ui_host_name)
    settings = Settings.from_env()
    path = settings.state_dir / DB_FILENAME
    if not path.is_file():
        raise click.ClickException(
            f"no state store at {path}: no run has been recorded there yet (set "
            "WARDEN_STATE_DIR to the state dir of the runs you want to see)"
        )
    with Store.open(path) as store:
        if run_id is not None:
            store.get_run(run_id)  # an unknown run is an error now, not an empty page
        asyncio.run(_serve(store, settings.state_dir, run_id, listen))


async def _serve(store: Store, state_dir: Path, run_id: str | None, listen: ListenConfig) -> None:
    from orchestrator.web.link import RemoteQuestions
    from orchestrator.web.server import PageServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    async with PageServer(
        store, RemoteQuestions(state_dir), listen=listen, run_id=run_id
    ) as server:
        click.echo(f"warden: the page (its link is its key): {server.url}", err=True)
        await stop.wait()
