"""`warden mcp`: warden's sandboxes as an MCP server (stdio, or streamable HTTP on
127.0.0.1 with a secret), one warden run per MCP session."""

from __future__ import annotations

import os
import secrets
import sys
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from orchestrator.commands._frame import (
    fail_on_option,
    model_endpoint,
    policy_options,
    replay_option,
)
from orchestrator.commands.agents import image_options

if TYPE_CHECKING:
    from orchestrator.api import RunConfig
    from orchestrator.config import Settings
    from orchestrator.mcp_server.front import StdioFront

DEFAULT_IDLE_TIMEOUT_S = 600.0
"""An HTTP session with no request in flight and no open event stream this long is
over: its run ends and its tasks are stopped."""
MIN_TOKEN_CHARS = 16
"""Shortest WARDEN_MCP_TOKEN accepted (a guessable secret protects nothing)."""


@click.command("mcp")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default="current directory",
    help="Directory shared with every subagent at /workspace.",
)
@click.option(
    "--http",
    "use_http",
    is_flag=True,
    help="Serve streamable HTTP on 127.0.0.1 instead of stdio; every request must carry "
    "'Authorization: Bearer TOKEN' (WARDEN_MCP_TOKEN, else a fresh one printed on stderr).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="Port for --http (0: any free port; the address is printed on stderr).",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_IDLE_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="--http: a session idle this long (no request, no open stream) ends, and its tasks "
    "are stopped.",
)
@click.option("--model", default=None, help="Model for the subagents.")
@policy_options
@click.option(
    "--max-concurrent", type=click.IntRange(min=1), default=None, help="Subagents running at once."
)
@click.option(
    "--max-depth", type=click.IntRange(min=1), default=None, help="How deep subagents may nest."
)
@click.option(
    "--token-budget",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="Tokens each subagent may spend.",
)
@click.option(
    "--protect",
    multiple=True,
    metavar="PATH",
    help="Workspace path mounted read-only (repeatable).",
)
@click.option(
    "--trust-workspace",
    is_flag=True,
    help="Trust the workspace: its .claude/ allow rules, mode, hooks and agent files apply "
    "(or WARDEN_TRUST_WORKSPACE=1; nobody can be asked on stdio).",
)
@image_options
@replay_option("Answer the subagents' model calls from this script (offline).")
@fail_on_option("The result document's exit code is 3 when one of these happened in a session")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="When a session ends, write its JUnit report here (a second session: FILE-2…).",
)
@click.option(
    "--result-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="When a session ends, write its result document (as `warden run --output-format "
    "json`) here.",
)
@click.option(
    "--audit-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="When a session ends, write its permission decisions here as JSON.",
)
def mcp(
    workspace: Path,
    use_http: bool,
    port: int,
    idle_timeout: float,
    model: str | None,
    policy: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    permission_mode: str | None,
    approval_timeout: float | None,
    max_concurrent: int | None,
    max_depth: int | None,
    token_budget: int | None,
    protect: tuple[str, ...],
    trust_workspace: bool,
    image: str | None,
    bash_image: str | None,
    devcontainer: bool | None,
    replay: Path | None,
    fail_on: tuple[str, ...],
    junit: Path | None,
    result_file: Path | None,
    audit_out: Path | None,
) -> None:
    """Serve warden's Task, TaskOutput and TaskStop tools over MCP.

    Any MCP client (Claude Code, an IDE, a program) delegates into warden's sandboxes:
    each Task runs a subagent in its own locked-down container under the workspace's
    policy. One MCP session is one warden run. Questions go to the client as MCP
    elicitation when it supports it, else get the mode's answer (deny).

    \b
    Claude Code:  claude mcp add warden -- warden mcp --workspace "$PWD"
    """
    from orchestrator.commands.trust import resolve_workspace_trust
    from orchestrator.config import Settings
    from orchestrator.errors import ConfigError, WardenError
    from orchestrator.exit_codes import exit_code_for
    from orchestrator.lifecycle.interrupts import run_stoppable
    from orchestrator.untrusted_text import printable

    # stdio: answer the client's handshake and tool listing at once, while the rest
    # (the MCP SDK, the engine client, images, policy, the model SDK) loads here.
    front = None if use_http else _front()
    failure: WardenError | None = None
    try:
        settings = replace(Settings.from_env(), non_interactive=True)
        trusted = resolve_workspace_trust(settings, workspace, trust_workspace, interactive=False)
    except WardenError as exc:
        if front is None:
            raise
        front.set_listing(None)  # the client is connected: its Task calls say what is wrong
        settings, trusted, failure = Settings(non_interactive=True), False, exc
    if front is not None and failure is None:
        front.set_listing(_listing(settings, workspace, trusted))
    try:
        config = _run_config(
            workspace=workspace.resolve(),
            label=f"warden mcp ({'http' if use_http else 'stdio'})",
            model=model,
            policy=policy,
            allow=allow,
            deny=deny,
            mode=permission_mode,
            trusted=trusted,
            max_concurrent=max_concurrent,
            max_depth=max_depth,
            token_budget=token_budget,
            protect=protect,
            image=image,
            bash_image=bash_image,
            devcontainer=devcontainer,
            approval_timeout_s=approval_timeout,
            fail_on=fail_on,
            junit=junit,
            result_file=result_file,
            audit_out=audit_out,
        )
    except ValueError as exc:
        if front is None:
            raise click.UsageError(str(exc)) from None
        failure = failure or ConfigError(f"{exc} (fix the `warden mcp` arguments)")
        config = None
    secret = _secret() if use_http else ""

    async def main() -> int:
        from orchestrator import start_up_done
        from orchestrator.broker.client import import_in_background
        from orchestrator.mcp_server.runs import SessionRuns
        from orchestrator.mcp_server.server import HTTP_PATH, listen, serve_http, serve_stdio
        from orchestrator.runtime import session  # noqa: F401  # the run's imports, gc off

        import_in_background()  # the model SDK, for the first run (gc off until it is in)
        start_up_done()
        async with AsyncExitStack() as stack:
            if front is not None:
                failure_now: WardenError | None = failure
                try:
                    configured = await model_endpoint(stack, settings, replay)
                except click.UsageError as exc:
                    configured, failure_now = settings, ConfigError(exc.format_message())
                    click.echo(f"warden: error: {failure_now}", err=True)
                runs = SessionRuns(
                    None if failure_now else config, configured, one_session=True,
                    failure=failure_now,
                )  # fmt: skip
                await serve_stdio(runs, front)
                return exit_code_for(failure_now) if failure_now else 0
            configured = await model_endpoint(stack, settings, replay)
            sock = listen(port)
            click.echo(
                f"warden mcp: serving MCP on http://127.0.0.1:{sock.getsockname()[1]}"
                f"{HTTP_PATH} (send 'Authorization: Bearer TOKEN')",
                err=True,
            )
            return await serve_http(SessionRuns(config, configured), sock, secret, idle_timeout)

    if failure is not None:
        click.echo(f"warden: error: {printable(failure, None, multiline=True)}", err=True)
    try:
        code = run_stoppable(main())
    except (WardenError, click.UsageError) as exc:
        click.echo(f"warden: error: {printable(exc, None, multiline=True)}", err=True)
        sys.exit(exit_code_for(exc))
    sys.exit(code)


def _front() -> StdioFront:
    """The stdio front, already answering when `orchestrator.launch` started it."""
    from orchestrator.mcp_server.front import start_on_stdio

    return start_on_stdio()


def _listing(settings: Settings, workspace: Path, trusted: bool) -> list[dict[str, Any]] | None:
    """The tools as `tools/list` gives them, with the workspace's agent types; None
    (the SDK server lists them once loaded) when the agent files cannot be read."""
    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.errors import WardenError
    from orchestrator.mcp_server.listing import tool_dicts

    try:
        registry = AgentRegistry.load(settings, workspace.resolve(), trusted=trusted)
    except (WardenError, OSError):
        return None
    return tool_dicts([(a.name, a.description) for a in registry.listed()])


def _run_config(**fields: Any) -> RunConfig:  # Any: RunConfig's fields, checked by it
    from orchestrator.api import RunConfig

    return RunConfig(**fields)


def _secret() -> str:
    given = os.environ.get("WARDEN_MCP_TOKEN")
    if given is not None:
        if len(given) < MIN_TOKEN_CHARS:
            raise click.UsageError(
                f"WARDEN_MCP_TOKEN is shorter than {MIN_TOKEN_CHARS} characters; use a random "
                "one, e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        return given
    token = secrets.token_urlsafe(32)
    click.echo(
        f"warden mcp: this server's token (set WARDEN_MCP_TOKEN to choose it): {token}", err=True
    )
    return token
