"""The frame `warden run` and `warden resume` share: the model endpoint, the approver,
the live display, the stop signals, and the one way a run ends (`finish_run`: exit
code, the single `--json` result document, `--fail-on`, `--junit`, `--audit-out`,
the summary table). The two commands differ only in what they open and what work
they do inside the run."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, cast, get_args

import click

from orchestrator.errors import WardenError
from orchestrator.exit_codes import FAIL_ON_OUTCOMES, ExitCode, exit_code_for
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.permissions.approval_hub import ApproverHub
    from orchestrator.permissions.approvers import Approver
    from orchestrator.results.report import RunOutputs, RunState
    from orchestrator.runtime.session import Run
    from orchestrator.ui.progress import Progress
    from orchestrator.web.guard import ListenConfig

OpenRun = Callable[["Settings", "Approver"], AbstractAsyncContextManager["Run"]]
"""Opens the run, given the settings pointing at the model and the approver."""
Work = Callable[["Run"], Awaitable[str]]
"""What the run does; returns the final text. A WardenError it raises is a run error."""

WORK_STOP_S = 10.0
"""Longest a stopping run waits for its work (the parent's loop) once its subagents
are stopped; the process's own stop grace bounds the whole stop anyway."""
REPLAY_KEY = "warden-replay-key"
"""The key the offline scripted server expects: it proves the key reaches the model
endpoint from the host (and the tests prove it never enters a container)."""


F = TypeVar("F", bound=Callable[..., object])

OutputFormat = Literal["text", "json", "stream-json"]
"""What a run prints on stdout: the answer (`text`), one result document (`json`), or
events as JSON lines ending with the result document (`stream-json`, also `--json`).
The names are Claude Code's `--output-format` values."""


def output_format(json_mode: bool, chosen: str | None) -> OutputFormat:
    """`--json` and `--output-format` as one value; contradicting them is a usage error."""
    if json_mode and chosen == "text":
        raise click.UsageError("--json and --output-format text contradict each other")
    if chosen in ("json", "stream-json"):
        return cast(OutputFormat, chosen)
    return "stream-json" if json_mode else "text"


def replay_option(help: str) -> Callable[[F], F]:
    """`--replay SCRIPT`: model calls answered by warden's scripted server (offline)."""
    return click.option(
        "--replay",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help=help,
    )


def fail_on_option(help: str) -> Callable[[F], F]:
    """`--fail-on OUTCOMES` (checked by `parse_fail_on`); `help` is followed by the
    outcomes it accepts (`exit_codes.Outcome`)."""
    return click.option(
        "--fail-on",
        callback=lambda _ctx, _param, value: _parse_fail_on(value),
        default=None,
        metavar="OUTCOMES",
        help=f"{help} (comma list): {', '.join(FAIL_ON_OUTCOMES)}.",
    )


def _parse_fail_on(value: str | None) -> tuple[str, ...]:
    if not value:  # the usual case: nothing to check, and nothing to import
        return ()
    from orchestrator.results.report import parse_fail_on

    return parse_fail_on(value)


def outcome_options(what: str) -> Callable[[F], F]:
    """`--json`/`--output-format`, `--replay`, `--fail-on`, `--junit` and `--audit-out`:
    how a run (of `warden run` or `warden resume`) reports its end; one definition for
    both. The command receives `output: OutputFormat` for the first two."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: object, json_mode: bool, output_fmt: str | None, **kw: object) -> object:
            return fn(*args, output=output_format(json_mode, output_fmt), **kw)

        for option in reversed(
            [
                click.option(
                    "--json",
                    "json_mode",
                    is_flag=True,
                    help="Write events and the result as JSON lines on stdout "
                    "(--output-format stream-json).",
                ),
                click.option(
                    "--output-format",
                    "output_fmt",
                    type=click.Choice(get_args(OutputFormat)),
                    default=None,
                    help="text: the answer; json: one result document; stream-json: events "
                    "as JSON lines, then the result document (as --json).",
                ),
                replay_option(
                    "Answer model calls from this script with warden's scripted model "
                    "server (offline)."
                ),
                fail_on_option(f"Exit 3 when one of these happened in {what}"),
                click.option(
                    "--junit",
                    "junit_path",
                    type=click.Path(dir_okay=False, writable=True, path_type=Path),
                    default=None,
                    metavar="FILE",
                    help="Write a JUnit XML report: one test case per task, failures for "
                    "failed, timed-out and denied.",
                ),
                click.option(
                    "--audit-out",
                    type=click.Path(dir_okay=False, writable=True, path_type=Path),
                    default=None,
                    metavar="FILE",
                    help="Write the run's permission decisions as JSON (as `warden audit --json`).",
                ),
            ]
        ):
            command = option(command)
        return cast(F, command)

    return decorate


def run_to_end(
    settings: Settings,
    outputs: RunOutputs,
    main: Callable[[RunState], Coroutine[Any, Any, int]],  # Any: a coroutine's send/yield types
    timeout_s: float | None = None,
) -> NoReturn:
    """Run `main` under the stop signals and end the process the one way runs end.

    SIGINT, SIGTERM and SIGHUP stop the run cleanly (exit 130, 143, 129), and so does
    `timeout_s` passing (exit 124, the error says so); an error raised before the run
    started (settings, policy, workspace, engine, images, an unknown session) still
    ends with a result document."""
    from orchestrator.lifecycle.interrupts import Stopped, run_stoppable
    from orchestrator.results.report import RunState, finish_run, one_line

    state = RunState()
    stopped = Stopped()
    try:
        code = run_stoppable(main(state), stopped, deadline_s=timeout_s)
        if stopped.timed_out:
            state.error = (
                f"the run passed its --timeout of {timeout_s:g} s: every subagent was "
                "stopped; their transcripts are kept"
            )
            click.echo(f"warden: {state.error}", err=True)
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
    except (WardenError, click.UsageError) as exc:
        code = exit_code_for(exc)
        state.error = one_line(exc)
        click.echo(f"warden: error: {printable(exc, None, multiline=True)}", err=True)
    sys.exit(finish_run(settings, state, code, outputs))


def policy_options(fn: F) -> F:
    """`--policy`, `--allow`, `--deny`, `--permission-mode` and `--approval-timeout`:
    what decides a run's tool calls; one definition for every command that runs agents."""
    for option in reversed(
        [
            click.option(
                "--policy",
                default=None,
                help="Policy file, or a shipped one by name: default, ci, strict.",
            ),
            click.option(
                "--allow",
                multiple=True,
                metavar="RULE",
                help="Allow rule, e.g. 'Bash(npm test:*)' (repeatable).",
            ),
            click.option(
                "--deny",
                multiple=True,
                metavar="RULE",
                help="Deny rule, e.g. 'Read(./.env)' (repeatable).",
            ),
            click.option(
                "--permission-mode",
                type=click.Choice(
                    ["default", "acceptEdits", "dontAsk", "plan", "bypassPermissions"]
                ),
                default=None,
                help="Permission mode (default: from the settings files, else 'default').",
            ),
            click.option(
                "--approval-timeout",
                type=click.FloatRange(min=1),
                default=None,
                metavar="SECONDS",
                help="Deny a question nobody answers within this time.",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def approver_option(fn: F) -> F:
    """`--approver CHANNEL` (repeatable), for every command that runs agents."""
    return click.option(
        "--approver",
        "approvers",
        multiple=True,
        metavar="CHANNEL",
        callback=lambda _ctx, _param, value: check_approvers(value),
        help="Who answers questions (repeatable; all are asked, the first answer wins): "
        "terminal, webhook:URL (signed with WARDEN_WEBHOOK_SECRET; docs/webhook.md). "
        "Default: WARDEN_APPROVERS, else the terminal.",
    )(fn)


def check_approvers(specs: tuple[str, ...]) -> tuple[str, ...]:
    """`--approver` values, each a channel warden knows (a usage error names the bad one)."""
    from orchestrator.config import approver_spec_problem

    for spec in specs:
        problem = approver_spec_problem(spec)
        if problem:
            raise click.BadParameter(problem, param_hint="--approver")
    return specs


def make_approver(
    settings: Settings,
    progress: Progress,
    timeout_s: float | None,
    chosen: tuple[str, ...] = (),
) -> ApproverHub:
    """The run's approver: a hub that offers every question to each live channel (the
    terminal when there is a person at one; others add theirs with `add_channel`).
    With no channel at all, every question is denied with advice. `chosen` are the
    `--approver` values (else the settings'); webhooks are added by `open_webhooks`."""
    from orchestrator.permissions.approval_hub import ApproverHub
    from orchestrator.ui.approval_prompt import TerminalApprover

    hub = ApproverHub(timeout_s=timeout_s)
    has_terminal = sys.stdin.isatty() and sys.stdout.isatty()
    if chosen:  # asked for by name: there must be a terminal
        terminal = "terminal" in chosen
        if terminal and not has_terminal:
            raise click.UsageError(
                "--approver terminal needs a terminal on stdin and stdout; use --approver "
                "webhook:URL (or --ui) to answer from elsewhere"
            )
    else:  # the default (or WARDEN_APPROVERS): the terminal when a person is at one
        wanted = "terminal" in settings.approvers if settings.approvers else True
        terminal = wanted and has_terminal and not settings.non_interactive
    if terminal:
        hub.add_channel(progress.pausing(TerminalApprover(table=progress.prompt_table())))
    return hub


async def open_webhooks(
    stack: AsyncExitStack, settings: Settings, hub: ApproverHub, chosen: tuple[str, ...]
) -> None:
    """Add a channel to `hub` for each `webhook:URL` approver; each serves its answer
    URL until the run ends."""
    urls = [s.removeprefix("webhook:") for s in chosen or settings.approvers if s != "terminal"]
    if not urls:
        return
    from orchestrator.apply.review_document import ReviewDocuments
    from orchestrator.permissions.webhook import WebhookApprover

    if urls and settings.webhook_secret is None:
        raise click.UsageError(
            "a webhook approver needs the shared secret its receiver checks: set "
            "WARDEN_WEBHOOK_SECRET (never on the command line, where `ps` shows it)"
        )
    for url in urls:
        assert settings.webhook_secret is not None
        hook = WebhookApprover(
            url,
            secret=settings.webhook_secret.get_secret_value().encode(),
            timeout_s=settings.webhook_timeout_s,
            listen=settings.webhook_listen,
            callback_url=settings.webhook_callback_url,
            documents=ReviewDocuments(),
        )
        try:
            hub.add_channel(await stack.enter_async_context(hook))
        except OSError as exc:
            raise click.UsageError(
                f"cannot take webhook answers on {settings.webhook_listen} ({exc}); "
                "set WARDEN_WEBHOOK_LISTEN to a free HOST:PORT"
            ) from exc


async def model_endpoint(
    stack: AsyncExitStack, settings: Settings, replay: Path | None
) -> Settings:
    """Settings pointing at the model: the scripted server for --replay, else the env's."""
    if replay is not None:
        from orchestrator.config import Secret
        from orchestrator.scripted import Script, ScriptedModelServer

        server = ScriptedModelServer(Script.load(replay), expected_api_key=REPLAY_KEY)
        await stack.enter_async_context(server)
        return replace(
            settings, anthropic_base_url=server.base_url, anthropic_api_key=Secret(REPLAY_KEY)
        )
    if settings.anthropic_api_key is None:
        raise click.UsageError(
            "ANTHROPIC_API_KEY is not set: set it (and ANTHROPIC_BASE_URL for another "
            "Anthropic-compatible endpoint), or run offline with --replay SCRIPT"
        )
    return settings


async def drive(
    settings: Settings,
    state: RunState,
    *,
    output: OutputFormat,
    replay: Path | None,
    approval_timeout: float | None,
    open_run: OpenRun,
    work: Work,
    non_interactive: bool = False,
    page: ListenConfig | None = None,
    approvers: tuple[str, ...] = (),
) -> int:
    """Open the run, do `work`, record how it ended; what it leaves in `state` becomes
    the result document (`finish_run`). With `page`, the run's web page is served
    there and is where questions are answered (`--ui`)."""
    from orchestrator.results.report import one_line
    from orchestrator.ui.progress import Progress
    from orchestrator.workspace.report import end_of_run_report

    async with AsyncExitStack() as stack:
        settings = await model_endpoint(stack, settings, replay)
        if non_interactive:
            settings = replace(settings, non_interactive=True)
        json_mode = output != "text"
        progress = Progress(json_mode=json_mode, events=output == "stream-json")
        web = None
        if page is not None:
            from orchestrator.web.approver import WebApprover

            web = WebApprover()
        approver = make_approver(settings, progress, approval_timeout, approvers)
        await open_webhooks(stack, settings, approver, approvers)
        if web is not None:  # the page is one more channel: the first answer wins
            approver.add_channel(web)
        the_run = await stack.enter_async_context(open_run(settings, approver))
        # Before the run closes its brokers: no question may keep a call waiting then.
        stack.callback(approver.close)
        state.run_id, state.events_path = the_run.run_id, the_run.events_path
        if page is not None and web is not None:
            from orchestrator.commands._page import open_page

            url = await open_page(stack, the_run, web, page)
            # Printed once and kept nowhere: the link is the key to the page.
            click.echo(f"warden: the run's page (its link is its key): {url}", err=True)
        stack.enter_context(progress)
        the_run.events.subscribe(progress)  # for the rest of the run, its teardown too
        code = ExitCode.RUN_ERROR
        # Shielded: a stop reaches this frame at once, even while the work waits on a
        # subagent whose call waits on a person; the frame then denies the questions
        # and stops the work itself (below).
        working = asyncio.ensure_future(work(the_run))
        try:
            try:
                state.text = await asyncio.shield(working)
            finally:
                # The live display ends with the work: what follows (errors, the
                # report, the summary) is printed below it, never under its redraws.
                progress.pause()
            state.status, code = "completed", ExitCode.OK
        except WardenError as exc:  # e.g. the model API refused for good: one line
            state.error = one_line(exc)
            click.echo(f"warden: error: {printable(exc, None, multiline=True)}", err=True)
        except asyncio.CancelledError:
            # Ctrl-C or a stop signal: stop everything this run started, say so, keep
            # what was written. A run that cannot record any more (`events.failure`)
            # ends the same way, with that error.
            lost = the_run.hold.lost if the_run.hold is not None else None
            state.status = "failed" if the_run.events.failure or lost else "stopped"
            approver.close()  # waiting questions are denied: nobody waits on a person now
            working.cancel()
            await asyncio.shield(the_run.manager.close())
            await asyncio.wait({working}, timeout=WORK_STOP_S)
            if the_run.events.failure is not None:
                raise the_run.events.failure from None
            if lost is not None:  # the workspace went away: a run error, said once
                state.error = str(lost)
                raise lost from None
            stopped = [c.task_id for c in the_run.manager.tasks.values() if c.status == "stopped"]
            click.echo(
                f"interrupted: stopped {len(stopped)} subagent(s) {' '.join(stopped)}; "
                f"their transcripts are kept (warden ps, warden logs TASK)",
                err=True,
            )
            raise
        except Exception as exc:  # a bug: keep its traceback, still end with a result
            state.error = f"internal error: {one_line(exc)}"
            import traceback

            traceback.print_exc()
        finally:
            if the_run.tracer is not None:
                the_run.tracer.set_outcome(state.status)
            await asyncio.to_thread(
                the_run.store.finish_run,
                the_run.run_id,
                state.status,
                state.text or state.error or None,
            )
            sensitive = await end_of_run_report(the_run.watch, the_run.store, the_run.run_id)
            if sensitive is not None:
                state.sensitive = sensitive.model_dump(mode="json")
                if not json_mode:
                    for line in sensitive.render():
                        click.echo(line, err=True)
        return int(code)
