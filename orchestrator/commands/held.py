"""`warden held [RUN]`: the changes runs made to files editors, shells and package
managers execute, put back at the end of the run and kept aside
(`workspace.held_changes`); `--apply` shows one run's as an escaped diff and writes
exactly what was shown, `--discard` drops them (`apply.held`)."""

from __future__ import annotations

import getpass
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.workspace.held_changes import HeldManifest


@click.command("held")
@click.argument("run_id", required=False)
@click.option("--apply", "do_apply", is_flag=True, help="Show the diff, then apply it on a yes.")
@click.option(
    "--hash",
    "sha256",
    metavar="SHA256",
    help="With --apply: apply without asking, only if the change set is still this one "
    "(the hash `warden held RUN` prints).",
)
@click.option(
    "--discard", is_flag=True, help="Drop RUN's held changes (the workspace keeps its own)."
)
@click.option("--json", "json_mode", is_flag=True, help="One JSON object per run.")
def held(
    run_id: str | None, do_apply: bool, sha256: str | None, discard: bool, json_mode: bool
) -> None:
    """List the runs whose held changes wait (no RUN), or show RUN's as a diff.

    The diff's names and lines were written by a sandbox: they are shown as data
    (escapes mark characters that would not show). `--apply` asks at a terminal
    and binds your yes to the hash of what was shown; `--apply --hash SHA256`
    applies without asking, only if the changes are still exactly that. Nothing
    is written when anything changed since; the decision is in the run's audit.
    Exit 1 when nothing was applied or discarded."""
    from orchestrator.apply.held import NoHeldChangesError, review, waiting
    from orchestrator.apply.render import render_change_set
    from orchestrator.config import Settings

    settings = Settings.from_env()
    if run_id is None:
        if do_apply or discard or sha256:
            raise click.UsageError("--apply, --hash and --discard need a RUN")
        _list(waiting(settings.state_dir), json_mode)
        return
    if sha256 and not do_apply:
        raise click.UsageError("--hash goes with --apply")
    if do_apply and discard:
        raise click.UsageError("--apply or --discard, not both")
    try:
        found = review(settings.state_dir, run_id)
    except NoHeldChangesError as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(1) from None
    view = render_change_set(found.change_set, found.store)
    if json_mode and not (do_apply or discard):
        click.echo(view.model_dump_json())
        return
    if discard:
        _discard(settings, run_id)
        return
    click.echo(view.text(), nl=False)
    if not do_apply:
        click.echo(f"apply it: warden held {run_id} --apply (or --hash {view.sha256})")
        return
    if sha256 is None:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "no terminal to answer on: review the above and pass --hash "
                f"{view.sha256} to apply exactly it"
            )
        if not click.confirm(f"Apply change set {view.sha256[:12]} as shown?", default=False):
            click.echo("not applied; the changes keep waiting")
            raise SystemExit(1)
        sha256 = view.sha256
    _apply(settings, run_id, sha256, found.manifest.workspace)


def _apply(settings: Settings, run_id: str, sha256: str, workspace: str) -> None:
    from orchestrator.apply.held import HeldChangedError, apply_held, audit_held
    from orchestrator.lifecycle.recovery import open_store
    from orchestrator.untrusted_text import printable

    try:
        with open_store(settings) as store:
            decision = apply_held(
                settings.state_dir, run_id, sha256, f"cli:{getpass.getuser()}", audit_held(store)
            )
    except HeldChangedError as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(1) from None
    click.echo(f"applied {len(decision.applied)} path(s) to {workspace}")
    for reason in decision.reasons:
        click.echo(f"  {printable(reason.path)}: {printable(reason.reason)}", err=True)
    if decision.outcome != "applied":
        raise SystemExit(1)


def _discard(settings: Settings, run_id: str) -> None:
    from orchestrator.apply.held import audit_held, discard_held
    from orchestrator.lifecycle.recovery import open_store

    with open_store(settings) as store:
        count = discard_held(
            settings.state_dir, run_id, f"cli:{getpass.getuser()}", audit_held(store)
        )
    click.echo(f"discarded {count} held change(s) of run {run_id} (the workspace is unchanged)")


def _list(found: list[HeldManifest], json_mode: bool) -> None:
    from orchestrator.commands._common import emit_json
    from orchestrator.untrusted_text import printable

    if not found and not json_mode:
        click.echo("no held changes wait for review")
    for manifest in found:
        if json_mode:
            emit_json(manifest.model_dump(mode="json"))
            continue
        click.echo(f"{manifest.run_id}  {len(manifest.changes)} change(s)  {manifest.workspace}")
        for change in manifest.changes[:10]:
            click.echo(f"    {change.change:<8} {printable(change.path)}")
        if len(manifest.changes) > 10:
            click.echo(
                f"    … and {len(manifest.changes) - 10} more (warden held {manifest.run_id})"
            )
