"""`warden agents`: which subagent types a run would have, from where, with what
(`list`, `show NAME`), and a check of agent files that fails on problems
(`validate [DIR]...`), for CI jobs that keep a library of agent files."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from orchestrator.commands._common import (
    TRUST_FLAG_HELP,
    described_trust,
    emit_json,
    untrusted_note,
)
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.agents.images import ImageChoice, RunImages
    from orchestrator.agents.registry import AgentRegistry

_WORKSPACE = click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Workspace whose .claude/agents/ are read.",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_TRUST = click.option("--trust-workspace", "trust_workspace", is_flag=True, help=TRUST_FLAG_HELP)
F = TypeVar("F", bound=Callable[..., Any])  # Any: any click command function


def image_options(command: F) -> F:
    """`--image`, `--bash-image`, `--devcontainer/--no-devcontainer` (shared by
    `warden run` and `warden agents list/show`, which show what a run would use)."""
    command = click.option(
        "--devcontainer/--no-devcontainer",
        default=None,
        help="Run subagents in the workspace's dev container (.devcontainer/devcontainer.json) "
        "[default: yes when it has one; WARDEN_DEVCONTAINER=0 turns that off].",
    )(command)
    command = click.option(
        "--bash-image",
        default=None,
        metavar="IMAGE",
        help="Give the built-in bash type this image instead of its restricted one "
        "(package managers, compilers, network clients in it become available to it).",
    )(command)
    return click.option(
        "--image",
        default=None,
        metavar="IMAGE",
        help="Image for subagents whose agent file names none: agent, bash, or any local "
        "Linux image with bash (it needs no Python) [default: the dev container, else agent].",
    )(command)


@click.group()
def agents() -> None:
    """List, show and validate subagent types (Claude Code agent files)."""


class _Described:
    """What a run in a workspace would have, decided with the trust `warden run` would
    start from: the registry it would load and its image choices."""

    def __init__(
        self,
        workspace: Path,
        trust_flag: bool,
        image: str | None,
        bash_image: str | None,
        devcontainer: bool | None,
    ) -> None:
        import logging

        from orchestrator.agents.registry import AgentRegistry
        from orchestrator.runtime.run_images import describe_run_images

        settings, self.trusted, why = described_trust(workspace, trust_flag)
        self.note = None if self.trusted else untrusted_note(workspace, why)
        # The registry's warnings are reported once, by the command (`_report`), not
        # also by its own log lines.
        logger = logging.getLogger("orchestrator.agents")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            self.registry: AgentRegistry = AgentRegistry.load(
                settings, workspace.resolve(), trusted=self.trusted
            )
        finally:
            logger.setLevel(level)
        self.run: RunImages = describe_run_images(
            settings, workspace, image=image, bash_image=bash_image,
            devcontainer=devcontainer, trusted=self.trusted,
        )  # fmt: skip

    @property
    def warnings(self) -> list[str]:
        return [*([self.note] if self.note else []), *self.registry.warnings]


def _may_delegate() -> bool:
    """Whether a task the parent starts gets Task: only below the run's max depth
    (WARDEN_MAX_DEPTH; default 1, so no)."""
    from orchestrator.config import Settings
    from orchestrator.runtime.caps import TaskManagerConfig

    return TaskManagerConfig.from_settings(Settings.from_env()).max_depth > 1


def _choice(agent: AgentDefinition, run: RunImages) -> ImageChoice:
    from orchestrator.agents.images import choose_image

    return choose_image(agent, run)


def _summary(agent: AgentDefinition, run: RunImages, may_delegate: bool) -> dict[str, Any]:
    choice = _choice(agent, run)
    return {
        "name": agent.name,
        "source": agent.source,
        "description": agent.description,
        "model": agent.model,
        "model_alias": agent.model_alias,
        "tools": agent.offered_tools(may_delegate=may_delegate),
        "listed_tools": None if agent.tools is None else list(agent.tools),
        "dropped_tools": list(agent.dropped_tools),
        "image": choice.name,
        "image_from": choice.origin,
        "max_turns": agent.max_turns,
        "timeout_s": agent.timeout_s,
        "memory_limit": agent.memory_limit,
        "memory": agent.memory_scope,
        "skills": list(agent.skills),
        "effort": agent.effort,
        "color": agent.color,
        "background": agent.background,
        "isolation": agent.isolation,
        "omit_claude_md": agent.omit_claude_md,
        "initial_prompt": agent.initial_prompt,
        "mcp_servers": [server.name for server in agent.mcp_servers],
        "cpus": agent.cpus,
        "pids": agent.pids,
        "permission_mode": agent.permission_mode,
        "hooks": [f"{h.event} {h.matcher or '*'}: {h.command}" for h in agent.hooks],
    }


def _model(agent: AgentDefinition) -> str:
    if agent.model is None:
        return "inherit"
    return f"{agent.model} ({agent.model_alias})" if agent.model_alias else agent.model


def _report(warnings: Sequence[str], problems: Sequence[str]) -> None:
    for warning in warnings:
        click.echo(f"warning: {printable(warning, None)}", err=True)
    for problem in problems:
        click.echo(f"problem: {printable(problem, None)}", err=True)


@agents.command("list")
@_WORKSPACE
@image_options
@_TRUST
@_JSON
def list_command(
    workspace: Path,
    image: str | None,
    bash_image: str | None,
    devcontainer: bool | None,
    trust_workspace: bool,
    as_json: bool,
) -> None:
    """Every subagent type a run in WORKSPACE would have, where it comes from, and
    the image it would run in (with the same --image/--bash-image/--devcontainer and
    the same trust as `warden run`)."""
    described = _Described(workspace, trust_workspace, image, bash_image, devcontainer)
    registry, run = described.registry, described.run
    may_delegate = _may_delegate()
    if as_json:
        emit_json(
            {
                "agents": [_summary(agent, run, may_delegate) for agent in registry],
                "trusted": described.trusted,
                "warnings": described.warnings,
                "problems": registry.problems,
            }
        )
        return
    for agent in registry:
        # Whole names (piped into `show`, they must work); tabs separate the columns.
        tools = ", ".join(agent.offered_tools(may_delegate=may_delegate)) or "none"
        click.echo(
            f"{printable(agent.name, None)}\t{printable(_model(agent), 60)}\t{tools}\t"
            f"{printable(_choice(agent, run).name, 60)}\t{printable(agent.source, None)}\t"
            f"{printable(agent.color or '-', 20)}"
        )
    _report(described.warnings, registry.problems)


@agents.command("show")
@click.argument("name")
@_WORKSPACE
@image_options
@_TRUST
@_JSON
def show_command(
    name: str,
    workspace: Path,
    image: str | None,
    bash_image: str | None,
    devcontainer: bool | None,
    trust_workspace: bool,
    as_json: bool,
) -> None:
    """One subagent type in full: source, model, tools, limits, the image it would run
    in and which rule chose it, system prompt (with the same trust as `warden run`)."""
    described = _Described(workspace, trust_workspace, image, bash_image, devcontainer)
    agent = described.registry.get(name)
    run = described.run
    may_delegate = _may_delegate()
    if as_json:
        emit_json(
            {
                **_summary(agent, run, may_delegate),
                "system_prompt": agent.system_prompt,
                "trusted": described.trusted,
            }
        )
        return
    if described.note:
        click.echo(f"note: {printable(described.note, None)}", err=True)
    summary = _summary(agent, run, may_delegate)
    del summary["listed_tools"]
    if not may_delegate and (agent.tools is None or "Task" in agent.tools):
        summary["tools"] = [*summary["tools"], "(Task with WARDEN_MAX_DEPTH / --max-depth >= 2)"]
    summary["model"] = _model(agent)
    del summary["model_alias"]
    for key, value in summary.items():
        if key in ("description",):
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        click.echo(f"{key + ':':16}{printable('-' if shown in (None, '') else shown, None)}")
    click.echo("description:")
    click.echo(printable(agent.description, None, multiline=True))
    click.echo("system prompt:")
    click.echo(printable(agent.system_prompt, None, multiline=True))


@agents.command("validate")
@click.argument(
    "directories", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@_WORKSPACE
@_JSON
def validate_command(directories: tuple[Path, ...], workspace: Path, as_json: bool) -> None:
    """Check agent files: each DIR (default: WORKSPACE/.claude/agents and the user's
    agents). Exits 1 when a file cannot be loaded; warnings do not fail."""
    from orchestrator.agents.files import load_agent_dir
    from orchestrator.agents.registry import PROJECT_AGENTS_DIR, USER_AGENTS_DIR
    from orchestrator.config import Settings

    if not directories:
        directories = (
            workspace.resolve() / PROJECT_AGENTS_DIR,
            Settings.from_env().config_dir / USER_AGENTS_DIR,
        )
    results = []
    failed = False
    for directory in directories:
        loaded = load_agent_dir(directory)
        failed = failed or bool(loaded.problems)
        results.append(
            {
                "directory": str(directory),
                "agents": [agent.name for agent in loaded.agents],
                "skipped": [str(path) for path in loaded.skipped],
                "warnings": loaded.warnings,
                "problems": loaded.problems,
            }
        )
    if as_json:
        emit_json({"ok": not failed, "directories": results})
    else:
        for result in results:
            click.echo(
                f"{printable(result['directory'], None)}: {len(result['agents'])} agent(s), "
                f"{len(result['skipped'])} other file(s) skipped, "
                f"{len(result['problems'])} problem(s)"
            )
            _report(result["warnings"], result["problems"])
    sys.exit(1 if failed else 0)
