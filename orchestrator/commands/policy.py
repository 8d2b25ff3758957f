"""`warden policy`: inspect permission policies (`warden policy explain TOOL INPUT`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from orchestrator.errors import PolicyError

_MODES = ("default", "acceptEdits", "dontAsk", "plan", "bypassPermissions")


@click.group()
def policy() -> None:
    """Inspect permission policies."""


def _tool_input(tool: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        if tool == "Bash":
            return {"command": raw}
        if tool in ("Read", "Write", "Edit"):
            return {"file_path": raw}
        if tool in ("Glob", "Grep"):
            return {"pattern": raw}
        if tool == "WebFetch":
            return {"url": raw}
        if tool == "Network":
            host, _, port = raw.rpartition(":") if raw.count(":") == 1 else (raw, "", "")
            return {"host": host, "port": int(port)} if port.isdigit() else {"host": raw}
        raise PolicyError(
            f'INPUT for {tool} must be a JSON object, e.g. \'{{"key": "value"}}\''
        ) from None
    if tool == "Bash" and isinstance(value, str):
        return {"command": value}
    if not isinstance(value, dict):
        raise PolicyError(
            f"INPUT must be a JSON object (for Bash also a plain command), got {raw!r}"
        )
    return value


@policy.command("explain")
@click.argument("tool")
@click.argument("tool_input", metavar="INPUT")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Workspace whose .claude/settings*.json apply.",
)
@click.option(
    "--policy",
    "policy_name",
    metavar="FILE|NAME",
    help="A policy file or a shipped policy (default, ci, strict).",
)
@click.option("--allow", multiple=True, metavar="RULE", help="An extra allow rule (repeatable).")
@click.option("--deny", multiple=True, metavar="RULE", help="An extra deny rule (repeatable).")
@click.option("--mode", type=click.Choice(_MODES), help="The permission mode.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.option(
    "--trust-workspace/--no-trust-workspace",
    "trust",
    default=None,
    help="Decide as in a trusted (or untrusted) workspace; default: as recorded.",
)
def explain_command(
    tool: str,
    tool_input: str,
    workspace: Path,
    policy_name: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    mode: str | None,
    as_json: bool,
    trust: bool | None,
) -> None:
    """Show how TOOL with INPUT is decided, by which rule from which source, and why.

    INPUT is the tool input as JSON; for Bash a plain command string works too,
    for Read/Write/Edit a path, for WebFetch a URL. `WebFetch`/`WebSearch` are
    decided as the broker forwards them, `Network HOST[:PORT]` as the egress
    proxy would. Hooks are not run.
    """
    from orchestrator.commands._explain import explain_call
    from orchestrator.config import Settings
    from orchestrator.permissions import analyser_bound
    from orchestrator.workspace.trust import is_trusted

    settings = Settings.from_env()
    analyser_bound.configure(settings.analyser_bound())
    ws = workspace.resolve()
    trusted = is_trusted(settings, ws) if trust is None else trust
    result, effective = explain_call(
        settings, ws, tool, _tool_input(tool, tool_input), policy_name=policy_name,
        allow=allow, deny=deny, mode=mode, trusted=trusted,
    )  # fmt: skip
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        return
    d = result.decision
    click.echo(f"decision: {d.behavior.upper()}")
    click.echo(f"reason:   {d.reason}")
    click.echo(f"rule:     {d.rule or '(none)'}")
    click.echo(f"source:   {d.source or '(none)'}")
    click.echo(f"mode:     {result.mode} (from {result.mode_source})")
    if result.subcommands:
        click.echo("parts:")
        for part in result.subcommands:
            verdict = part.verdict or "no rule"
            by = f" by {part.rule} ({part.source})" if part.rule else ""
            click.echo(f"  {part.kind:7} {part.text!r}: {verdict}{by}")
    for problem in result.problems:
        click.echo(f"not proven: {problem}")
    click.echo("sources:  " + (", ".join(effective.sources) or "(none)"))
    for note in effective.notes:
        click.echo(f"note:     {note}")
