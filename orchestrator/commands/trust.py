"""`warden trust`: show what a workspace's trust would unlock that is new or changed
since the last yes, as a diff, and record a new yes (`workspace.trust`); and the same
question at the start of `warden run` (`resolve_workspace_trust`)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from orchestrator.config import Settings
from orchestrator.untrusted_text import printable
from orchestrator.workspace.trust import TrustVerdict


@click.command("trust")
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The workspace (its exact path is what is trusted).",
)
@click.option("--yes", "-y", is_flag=True, help="Record the yes without asking (after showing).")
@click.option("--show", is_flag=True, help="Only show what is new or changed; record nothing.")
def trust(workspace: Path, yes: bool, show: bool) -> None:
    """Review and trust WORKSPACE's own settings, hooks, agent files, dev container and
    MCP configuration as they are now.

    Shows every file new, changed or removed since your last yes (names and a diff,
    as plain text: anyone, a sandbox included, may have written it), then asks.
    What you said yes to unlocks until it changes again."""
    from orchestrator.workspace.trust import remember, verdict

    settings = replace(Settings.from_env(), trust_workspace=False)
    ws = workspace.resolve()
    found = verdict(settings, ws)
    for line in describe(ws, found):
        click.echo(line)
    if found.trusted or show:
        return
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "no terminal to answer on: review the above and pass --yes to trust it"
            )
        if not click.confirm("Trust this content?", default=False):
            click.echo("not trusted; nothing recorded")
            return
    remember(settings, ws, found.prints)
    click.echo(f"trusted {ws} as shown ({len(found.prints)} file(s) recorded)")


def describe(ws: Path, found: TrustVerdict) -> list[str]:
    """The review: what trust unlocks, what changed since the last yes, as plain text."""
    from orchestrator.workspace.trusted_content import render

    if found.trusted:
        return [f"{ws}: trusted ({found.reason})"]
    lines = [f"{ws}: not trusted ({found.reason}). Trust would let in:"]
    lines += [f"  - {printable(w, 300)}" for w in found.wants]
    if found.claude_trusts:
        lines.append(
            "Claude Code trusts this folder; warden's trust covers content, so it asks once."
        )
    if found.changes:
        lines.append("New or changed since your last yes (written by anyone; plain text):")
        lines += ["  " + line for line in render(list(found.changes))]
    return lines


def resolve_workspace_trust(
    settings: Settings, workspace: Path, flag: bool, interactive: bool
) -> bool:
    """Trusted by the flag, the environment or a record whose content still matches;
    else, at a terminal, the change is shown and asked about once (a yes is recorded
    with the content shown); else not trusted, and the run says what it leaves out."""
    from orchestrator.workspace.trust import remember, verdict

    ws = workspace.resolve()
    if flag:
        return True
    found = verdict(settings, ws)
    if found.trusted:
        return True
    if interactive:
        for line in describe(ws, found):
            click.echo(line, err=True)
        if click.confirm("Do you trust this content to apply?", err=True):
            remember(settings, ws, found.prints)
            return True
    click.echo(
        f"warden: {ws} is not trusted ({found.reason}), so its own allow rules, mode, "
        f"hooks, agent files and dev container are not applied "
        f"({'; '.join(printable(w, 200) for w in found.wants)}); "
        "its deny and ask rules are. Review and trust it with `warden trust` "
        "(or this checkout as it is: --trust-workspace; CI: WARDEN_TRUST_WORKSPACE=1).",
        err=True,
    )
    return False
