"""`warden run`: a parent agent that delegates to sandboxed subagents."""

from __future__ import annotations

import asyncio
import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from orchestrator.commands.exec import UserType, disk_limit_options
from orchestrator.errors import WardenError
from orchestrator.exit_codes import ExitCode, exit_code_for
from orchestrator.results.models import Outcome
from orchestrator.results.report import (
    RunOutputs,
    RunState,
    finish_run,
    one_line,
    parse_fail_on,
)
from orchestrator.ui.untrusted_text import printable

if TYPE_CHECKING:
    from orchestrator.backend.base import DiskLimits


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
@click.option(
    "--policy", default=None, help="Policy file, or a shipped one by name: default, ci, strict."
)
@click.option(
    "--allow",
    multiple=True,
    metavar="RULE",
    help="Allow rule, e.g. 'Bash(npm test:*)' (repeatable).",
)
@click.option(
    "--deny", multiple=True, metavar="RULE", help="Deny rule, e.g. 'Read(./.env)' (repeatable)."
)
@click.option(
    "--permission-mode",
    type=click.Choice(["default", "acceptEdits", "dontAsk", "plan", "bypassPermissions"]),
    default=None,
    help="Permission mode (default: from the settings files, else 'default').",
)
@click.option(
    "--approval-timeout",
    type=click.FloatRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Deny a question nobody answers within this time.",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=None,
    help="How deep subagents may nest (default 1: they may not delegate; WARDEN_MAX_DEPTH).",
)
@click.option(
    "--max-concurrent",
    type=click.IntRange(min=1),
    default=None,
    help="Subagents running at once; more wait in a queue (default 32; WARDEN_MAX_CONCURRENT).",
)
@click.option(
    "--max-children",
    type=click.IntRange(min=1),
    default=None,
    help="Subagents one subagent may start (default 10; WARDEN_MAX_CHILDREN).",
)
@click.option(
    "--queue-limit",
    type=click.IntRange(min=0),
    default=None,
    help="Tasks that may wait for a free slot before more are refused (default 256; "
    "WARDEN_QUEUE_LIMIT).",
)
@click.option(
    "--protect",
    multiple=True,
    metavar="PATH",
    help="Workspace path mounted read-only in every sandbox, besides .claude/ and .git "
    "(repeatable; also `warden.protect` in settings.json).",
)
@click.option(
    "--token-budget",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="Tokens each subagent may spend (all usage fields, checked before each model call); "
    "an agent file's tokenBudget may lower it.",
)
@click.option(
    "--background",
    is_flag=True,
    help="Run Task calls in the background unless the model asks otherwise.",
)
@click.option(
    "--user",
    type=UserType(),
    default=None,
    help="uid:gid every sandbox runs as (default: the workspace owner; never root).",
)
@click.option(
    "--fail-on",
    callback=lambda _ctx, _param, value: parse_fail_on(value),
    default=None,
    metavar="OUTCOMES",
    help="Exit 3 when one of these happened (comma list): failed, timed_out, denied, asked.",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    metavar="FILE",
    help="Write a JUnit XML report: one test case per task, failures for failed, "
    "timed-out and denied.",
)
@click.option(
    "--audit-out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    metavar="FILE",
    help="Write the run's permission decisions as JSON (as `warden audit --json`).",
)
@disk_limit_options("one subagent", "the subagent is killed (disk_limit)")
def run(
    prompt: str,
    workspace: Path,
    model: str | None,
    json_mode: bool,
    replay: Path | None,
    policy: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    permission_mode: str | None,
    approval_timeout: float | None,
    max_depth: int | None,
    max_concurrent: int | None,
    max_children: int | None,
    queue_limit: int | None,
    protect: tuple[str, ...],
    token_budget: int | None,
    background: bool,
    user: str | None,
    fail_on: tuple[Outcome, ...],
    junit_path: Path | None,
    audit_out: Path | None,
    disk_write_limit: int | None,
    disk_free_floor: int | None,
) -> None:
    """Run PROMPT with a parent agent whose only tools delegate to subagents.

    Every tool call a subagent makes is decided on the host by the policy; a call
    the policy marks "ask" waits for you on a terminal, and is denied when no one
    can answer (CI=true, no TTY). Ctrl-C, SIGTERM and SIGHUP stop every subagent the
    run started and record the run as stopped (exit 130, 143, 129)."""
    from orchestrator.config import Settings

    settings = Settings.from_env()
    options = RunOptions(
        policy=policy,
        allow=allow,
        deny=deny,
        mode=permission_mode,
        approval_timeout=approval_timeout,
        caps={
            "max_depth": max_depth,
            "max_concurrent_total": max_concurrent,
            "max_children_per_task": max_children,
            "queue_limit": queue_limit,
        },
        background=background,
        protect=protect,
        token_budget=token_budget,
        disk=settings.disk_limits(disk_write_limit, disk_free_floor),
        user=user,
    )
    from orchestrator.lifecycle.interrupts import run_stoppable

    state = RunState()
    try:
        # SIGINT, SIGTERM and SIGHUP all stop the run cleanly: exit 130, 143, 129.
        code = run_stoppable(
            _run(settings, prompt, workspace, model, json_mode, replay, options, state)
        )
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
    except (WardenError, click.UsageError) as exc:
        # Raised before the parent ran (settings, policy, workspace, engine, images).
        code = exit_code_for(exc)
        state.error = one_line(exc)
        click.echo(f"warden: error: {printable(exc, None, multiline=True)}", err=True)
    outputs = RunOutputs(json_mode=json_mode, fail_on=fail_on, junit=junit_path, audit=audit_out)
    sys.exit(finish_run(settings, state, code, outputs))


@dataclass(frozen=True)
class RunOptions:
    """The permission and lifecycle flags of `warden run`."""

    policy: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    mode: str | None = None
    approval_timeout: float | None = None
    caps: dict[str, int | None] = field(default_factory=dict)
    """TaskManagerConfig fields given as flags (None: from the settings)."""
    background: bool = False
    protect: tuple[str, ...] = ()
    token_budget: int | None = None
    disk: DiskLimits | None = None
    """Sandbox disk limits (None: the settings' defaults)."""
    user: str | None = None
    """uid:gid of every sandbox (None: the workspace owner)."""


def make_approver(settings: Any, progress: Any, timeout_s: float | None) -> Any:
    """A human on a terminal if there is one; otherwise every question is denied."""
    from orchestrator.permissions.approvers import (
        NonInteractiveApprover,
        TerminalApprover,
        TimeoutApprover,
    )

    approver: Any
    if settings.non_interactive or not (sys.stdin.isatty() and sys.stdout.isatty()):
        approver = NonInteractiveApprover()
    else:
        approver = progress.pausing(TerminalApprover())
    if timeout_s is not None:
        approver = TimeoutApprover(approver, timeout_s)
    return approver


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
    options: RunOptions,
    state: RunState,
) -> int:
    """The run; what it leaves in `state` becomes the result document (`finish_run`)."""
    from orchestrator.runtime.session import open_run
    from orchestrator.runtime.tasks import TaskManagerConfig
    from orchestrator.ui.progress import Progress
    from orchestrator.workspace.report import end_of_run_report

    async with AsyncExitStack() as stack:
        settings = await model_endpoint(stack, settings, replay)
        progress = Progress(json_mode=json_mode)
        the_run = await stack.enter_async_context(
            open_run(
                settings,
                workspace=workspace,
                prompt=prompt,
                model=model,
                approver=make_approver(settings, progress, options.approval_timeout),
                policy=options.policy,
                allow=options.allow,
                deny=options.deny,
                mode=options.mode,
                config=TaskManagerConfig.from_settings(
                    settings,
                    max_total_tokens=options.token_budget,
                    fallback_uid=settings.fallback_uid,
                    disk=options.disk or settings.disk_limits(),
                    user=options.user,
                    **options.caps,
                ),
                protect=options.protect,
            )
        )
        state.run_id, state.events_path = the_run.run_id, the_run.events_path
        the_run.parent.background_default = options.background
        # Warm the built-in agents' sandboxes while the parent's first model call runs.
        the_run.manager.prewarm("general-purpose", "bash")
        stack.enter_context(progress)
        the_run.events.listeners.append(progress)
        code = ExitCode.RUN_ERROR
        try:
            result = await the_run.parent.run(prompt)
            state.status, state.text, code = "completed", result.text, ExitCode.OK
        except WardenError as exc:  # e.g. the model API refused for good: one line
            state.error = one_line(exc)
            click.echo(f"warden: error: {printable(exc, None, multiline=True)}", err=True)
        except asyncio.CancelledError:
            # Ctrl-C or a stop signal: stop everything this run started, say so, keep
            # what was written. A run that cannot record any more (`events.failure`)
            # ends the same way, with that error.
            state.status = "failed" if the_run.events.failure else "stopped"
            await asyncio.shield(the_run.manager.close())
            if the_run.events.failure is not None:
                raise the_run.events.failure from None
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
