"""`warden run`: a parent agent that delegates to sandboxed subagents."""

from __future__ import annotations

import sys
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import click

from orchestrator.commands._frame import (
    OutputFormat,
    approver_option,
    drive,
    outcome_options,
    policy_options,
    run_to_end,
)
from orchestrator.commands._page import page_from_flags, page_options
from orchestrator.commands._prompt import read_prompt
from orchestrator.commands.agents import image_options
from orchestrator.commands.exec import SizeType, UserType, disk_limit_options
from orchestrator.commands.trust import resolve_workspace_trust
from orchestrator.egress.flags import egress_options, limits_from_flags
from orchestrator.exit_codes import Outcome
from orchestrator.results.output_files import at_start
from orchestrator.results.report import RunOutputs, RunState

if TYPE_CHECKING:
    from orchestrator.backend.contract import DiskLimits
    from orchestrator.config import Settings
    from orchestrator.egress.setup import EgressRequest
    from orchestrator.permissions.approvers import Approver
    from orchestrator.runtime.caps import TaskCaps
    from orchestrator.runtime.session import Run
    from orchestrator.web.guard import ListenConfig


@click.command("run")
@click.argument("prompt", required=False)
@click.option(
    "--prompt-file",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    metavar="FILE",
    help="Read the prompt from FILE (`-`: standard input), for prompts longer than the "
    "shell allows. PROMPT `-` reads standard input too.",
)
@click.option(
    "-p",
    "--print",
    "print_mode",
    is_flag=True,
    help="Non-interactive, as Claude Code's -p: print the answer and ask no one on the "
    "terminal (questions get the mode's answer, as in CI).",
)
@click.option(
    "--timeout",
    "run_timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Deadline for the whole run: past it every subagent is stopped as Ctrl-C stops "
    "them, and warden exits 124.",
)
@click.option(
    "--max-turns",
    type=click.IntRange(min=1),
    default=None,
    help="Model turns the parent agent may take (as Claude Code's --max-turns).",
)
@click.option(
    "--allowedTools",
    "--allowed-tools",
    "allowed_tools",
    multiple=True,
    metavar="RULES",
    help="Claude Code's spelling of --allow: rules separated by commas or spaces (repeatable).",
)
@click.option(
    "--disallowedTools",
    "--disallowed-tools",
    "disallowed_tools",
    multiple=True,
    metavar="RULES",
    help="Claude Code's spelling of --deny: rules separated by commas or spaces (repeatable).",
)
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
@policy_options
@approver_option
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
    "--fork",
    is_flag=True,
    help="Fork mode: a Task call with fork: true (or an agent file's `fork: true`) starts "
    "its subagent from the parent's conversation and prompt cache instead of a fresh one.",
)
@click.option(
    "--isolation",
    type=click.Choice(["worktree"]),
    default=None,
    help="Run every subagent in its own working copy (unless its Task call or agent file "
    "says otherwise); its changes reach the workspace only through a reviewed apply.",
)
@click.option(
    "--apply",
    "apply_mode",
    type=click.Choice(["ask", "auto", "never"]),
    default=None,
    help="What happens to an isolated subagent's changes that policy passes: a person "
    "reviews them (ask, default), they are applied (auto, for CI), or they wait for "
    "`warden apply TASK` (never).",
)
@click.option(
    "--apply-max-file",
    "apply_max_file",
    type=SizeType(allow_zero=True),
    default=None,
    metavar="SIZE",
    help="Largest text file an isolated subagent's change set may write, e.g. 32m "
    "(default 16m, WARDEN_APPLY_MAX_FILE); a larger one rejects the change set.",
)
@click.option(
    "--apply-max-binary",
    "apply_max_binary",
    type=SizeType(allow_zero=True),
    default=None,
    metavar="SIZE",
    help="Largest binary file an isolated subagent's change set may write, e.g. 4m "
    "(default 1m, WARDEN_APPLY_MAX_BINARY); a larger one rejects the change set.",
)
@click.option(
    "--user",
    type=UserType(),
    default=None,
    help="uid:gid every sandbox runs as (default: the workspace owner; never root).",
)
@image_options
@disk_limit_options("one subagent", "the subagent is killed (disk_limit)")
@egress_options("subagents", SizeType(allow_zero=True))
@click.option(
    "--egress",
    "egress_on",
    is_flag=True,
    help="Give subagents the egress proxy even when no rule allows a domain: every "
    "destination is then a question (denied in dontAsk and CI).",
)
@click.option(
    "--trust-workspace",
    "trust_workspace",
    is_flag=True,
    help="Trust the workspace: its .claude/ allow rules, mode, hooks and agent files apply "
    "(asked on first use at a terminal; CI: this flag or WARDEN_TRUST_WORKSPACE=1).",
)
@page_options
@outcome_options("the run")
def run(
    prompt: str | None,
    prompt_file: Path | None,
    print_mode: bool,
    run_timeout: float | None,
    max_turns: int | None,
    allowed_tools: tuple[str, ...],
    disallowed_tools: tuple[str, ...],
    workspace: Path,
    model: str | None,
    output: OutputFormat,
    replay: Path | None,
    policy: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    permission_mode: str | None,
    approval_timeout: float | None,
    approvers: tuple[str, ...],
    max_depth: int | None,
    max_concurrent: int | None,
    max_children: int | None,
    queue_limit: int | None,
    protect: tuple[str, ...],
    token_budget: int | None,
    background: bool,
    fork: bool,
    isolation: str | None,
    apply_mode: str | None,
    apply_max_file: int | None,
    apply_max_binary: int | None,
    user: str | None,
    fail_on: tuple[Outcome, ...],
    junit_path: Path | None,
    audit_out: Path | None,
    disk_write_limit: int | None,
    disk_free_floor: int | None,
    allow_domains: tuple[str, ...],
    deny_domains: tuple[str, ...],
    egress_max_down: int | None,
    egress_max_up: int | None,
    egress_max_connections: int | None,
    egress_on: bool,
    image: str | None,
    bash_image: str | None,
    devcontainer: bool | None,
    trust_workspace: bool,
    ui: bool,
    ui_listen: str,
    ui_tls_cert: Path | None,
    ui_tls_key: Path | None,
    ui_host_name: tuple[str, ...],
) -> None:
    """Run PROMPT with a parent agent whose only tools delegate to subagents.

    Every tool call a subagent makes is decided on the host by the policy; a call
    the policy marks "ask" waits for you on a terminal, and is denied when no one
    can answer (CI=true, no TTY). Ctrl-C, SIGTERM and SIGHUP stop every subagent the
    run started and record the run as stopped (exit 130, 143, 129)."""
    from orchestrator.backend.contract import DiskLimits
    from orchestrator.config import Settings
    from orchestrator.egress.setup import EgressRequest
    from orchestrator.permissions.rules import split_tool_rules

    text = read_prompt(prompt, prompt_file)
    page = page_from_flags(ui, ui_listen, ui_tls_cert, ui_tls_key, ui_host_name)
    settings = Settings.from_env()
    if isolation is not None or apply_mode is not None:
        # Values click.Choice has checked against the fields' own Literal types.
        settings = replace(
            settings,
            isolation=cast(Literal["worktree"] | None, isolation or settings.isolation),
            apply_mode=cast(Literal["ask", "auto", "never"], apply_mode or settings.apply_mode),
        )
    if apply_max_file is not None:  # SizeType has checked it: a size, not negative
        settings = replace(settings, apply_max_file=apply_max_file)
    if apply_max_binary is not None:
        settings = replace(settings, apply_max_binary=apply_max_binary)
    interactive = not print_mode and not settings.non_interactive and sys.stdin.isatty()
    resolve_workspace_trust(settings, workspace, trust_workspace, interactive)
    options = RunOptions(
        # The run decides trust from its own snapshot of the files (`workspace.inputs`),
        # against the record a yes above just wrote: what changed since is not trusted.
        trusted=True if trust_workspace else None,
        policy=policy,
        allow=allow + tuple(r for v in allowed_tools for r in split_tool_rules(v)),
        deny=deny + tuple(r for v in disallowed_tools for r in split_tool_rules(v)),
        mode=permission_mode,
        approval_timeout=approval_timeout,
        approvers=approvers,
        caps={
            "max_depth": max_depth,
            "max_concurrent_total": max_concurrent,
            "max_children_per_task": max_children,
            "queue_limit": queue_limit,
        },
        background=background,
        fork=fork,
        non_interactive=print_mode,
        max_turns=max_turns,
        protect=protect,
        token_budget=token_budget,
        disk=DiskLimits.from_settings(settings, disk_write_limit, disk_free_floor),
        user=user,
        image=image,
        bash_image=bash_image,
        devcontainer=devcontainer,
        egress=EgressRequest(
            allow_domains=allow_domains,
            deny_domains=deny_domains,
            enabled=egress_on,
            limits=limits_from_flags(egress_max_down, egress_max_up, egress_max_connections),
        ),
        page=page,
    )
    outputs = RunOutputs(
        json_mode=output != "text",
        fail_on=fail_on,
        junit=at_start(junit_path, "--junit"),
        audit=at_start(audit_out, "--audit-out"),
    )
    run_to_end(
        settings,
        outputs,
        lambda state: _run(settings, text, workspace, model, output, replay, options, state),
        timeout_s=run_timeout,
    )


@dataclass(frozen=True)
class RunOptions:
    """The permission and lifecycle flags of `warden run`."""

    caps: TaskCaps
    """TaskManagerConfig fields given as flags (None: from the settings)."""
    policy: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    mode: str | None = None
    approval_timeout: float | None = None
    approvers: tuple[str, ...] = ()
    """`--approver`: the channels that answer questions (empty: the settings' or the terminal)."""
    background: bool = False
    fork: bool = False
    """`--fork`: fork mode is on (the parent offers it and its tool list allows it)."""
    non_interactive: bool = False
    """`-p`: nobody is asked on the terminal."""
    max_turns: int | None = None
    """The parent's model turns (None: its default)."""
    protect: tuple[str, ...] = ()
    token_budget: int | None = None
    disk: DiskLimits | None = None
    """Sandbox disk limits (None: the settings' defaults)."""
    user: str | None = None
    """uid:gid of every sandbox (None: the workspace owner)."""
    egress: EgressRequest | None = None
    """Domain flags and caps of the egress proxy (None: the settings files' only)."""
    image: str | None = None
    """`--image` (see `agents.images` for the precedence)."""
    bash_image: str | None = None
    """`--bash-image`: the built-in bash type's image instead of the restricted one."""
    devcontainer: bool | None = None
    """Use the workspace's dev container; None: the setting (WARDEN_DEVCONTAINER)."""
    trusted: bool | None = None
    """Whether the workspace's own loosening settings apply (None: as recorded)."""
    page: ListenConfig | None = None
    """`--ui`: where the run's web page listens (None: no page)."""


async def _run(
    settings: Settings,
    prompt: str,
    workspace: Path,
    model: str | None,
    output: OutputFormat,
    replay: Path | None,
    options: RunOptions,
    state: RunState,
) -> int:
    """The parent agent's run (`drive` frames it as every run is framed)."""
    from orchestrator import start_up_done
    from orchestrator.api import RunConfig, open_run_from
    from orchestrator.broker.client import import_in_background
    from orchestrator.runtime.parent import ParentOptions

    # The run's modules are imported; the model SDK's import goes on in the background
    # while the run starts (the collector comes back on when it is done).
    import_in_background()
    start_up_done()

    def opened(settings: Settings, approver: Approver) -> AbstractAsyncContextManager[Run]:
        # The one mapping from a run's options to a run, shared with the library and
        # `warden mcp` (orchestrator.api).
        egress = options.egress
        return open_run_from(
            RunConfig(
                workspace=workspace,
                label=prompt,
                model=model,
                policy=options.policy,
                allow=options.allow,
                deny=options.deny,
                mode=options.mode,  # type: ignore[arg-type]  # click.Choice of the modes
                trusted=options.trusted,
                max_depth=options.caps.get("max_depth"),
                max_concurrent=options.caps.get("max_concurrent_total"),
                max_children=options.caps.get("max_children_per_task"),
                queue_limit=options.caps.get("queue_limit"),
                token_budget=options.token_budget,
                protect=options.protect,
                user=options.user,
                image=options.image,
                bash_image=options.bash_image,
                devcontainer=options.devcontainer,
                allow_domains=egress.allow_domains if egress else (),
                deny_domains=egress.deny_domains if egress else (),
                egress=egress.enabled if egress else False,
                egress_limits=egress.limits if egress else None,
                disk=options.disk,
            ),
            settings,
            approver,
            parent_options=ParentOptions(
                background_default=options.background,
                fork=options.fork,
                **({"max_turns": options.max_turns} if options.max_turns is not None else {}),
            ),
        )

    async def work(the_run: Run) -> str:
        # Warm the built-in agents' sandboxes while the parent's first model call runs.
        the_run.manager.prewarm("general-purpose", "bash")
        return (await the_run.parent.run(prompt)).text

    return await drive(
        settings,
        state,
        output=output,
        replay=replay,
        approval_timeout=options.approval_timeout,
        approvers=options.approvers,
        open_run=opened,
        work=work,
        non_interactive=options.non_interactive,
        page=options.page,
    )
