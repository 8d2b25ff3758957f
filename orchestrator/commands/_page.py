"""The page flags `warden run --ui` and `warden ui` share, and opening a live
run's page (`orchestrator.web`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from orchestrator.runtime.session import Run
    from orchestrator.web.approver import WebApprover
    from orchestrator.web.guard import ListenConfig

F = TypeVar("F", bound=Callable[..., object])


def listen_options(fn: F) -> F:
    """`--ui-listen`, `--ui-tls-cert`, `--ui-tls-key`, `--ui-host-name`."""
    for option in reversed(
        [
            click.option(
                "--ui-listen",
                default="127.0.0.1:0",
                show_default=True,
                metavar="HOST:PORT",
                help="Where the page listens (port 0: a free one). Anything but loopback "
                "needs --ui-tls-cert and --ui-tls-key.",
            ),
            click.option(
                "--ui-tls-cert",
                type=click.Path(dir_okay=False, exists=True, path_type=Path),
                default=None,
                help="Serve the page over HTTPS with this PEM certificate chain.",
            ),
            click.option(
                "--ui-tls-key",
                type=click.Path(dir_okay=False, exists=True, path_type=Path),
                default=None,
                help="The private key of --ui-tls-cert (PEM).",
            ),
            click.option(
                "--ui-host-name",
                multiple=True,
                metavar="NAME",
                help="A further host name browsers reach the page by (the Host check; repeatable).",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def page_options(fn: F) -> F:
    """`--ui` and the listen flags: a run or resume that serves its page."""
    fn = listen_options(fn)
    return click.option(
        "--ui",
        "ui",
        is_flag=True,
        help="Serve the run's web page (live task tree, questions, events, transcripts, "
        "audit) and answer questions there too; its link, printed once, is its key.",
    )(fn)


def page_from_flags(
    ui: bool, listen: str, cert: Path | None, key: Path | None, names: tuple[str, ...]
) -> ListenConfig | None:
    """Where the page listens, or None without `--ui`."""
    return listen_config(listen, cert, key, names) if ui else None


def listen_config(
    listen: str, cert: Path | None, key: Path | None, names: tuple[str, ...]
) -> ListenConfig:
    """The flags as a checked ListenConfig (a usage error names what is wrong)."""
    from orchestrator.errors import ConfigError
    from orchestrator.web.guard import ListenConfig, parse_listen

    try:
        host, port = parse_listen(listen)
        config = ListenConfig(host=host, port=port, tls_cert=cert, tls_key=key, names=names)
        config.check()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return config


async def open_page(
    stack: AsyncExitStack, the_run: Run, approver: WebApprover, listen: ListenConfig
) -> str:
    """Start the run's page and its link for `warden ui`; both stop with `stack`.
    Returns the page's URL (with its secret)."""
    from orchestrator.web.approver import LocalQuestions
    from orchestrator.web.link import RunLink
    from orchestrator.web.server import PageServer

    stack.callback(the_run.events.subscribe(approver.changes))
    server = PageServer(
        the_run.store, LocalQuestions(approver), listen=listen, run_id=the_run.run_id
    )
    url = await server.start()
    stack.push_async_callback(server.close)
    link = RunLink(approver, the_run.settings.state_dir, the_run.run_id)
    await link.start()
    stack.push_async_callback(link.close)
    return url
