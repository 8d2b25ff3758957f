"""`warden apply TASK` and `warden discard TASK`: a waiting change set of an
isolated subagent (`isolation: worktree`) merged into its workspace, or removed.
`warden ps --pending` lists them."""

from __future__ import annotations

import asyncio
import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.apply.changeset import ApplyDecision

if TYPE_CHECKING:
    from orchestrator.apply.changeset import ChangeSet, ContentStore
    from orchestrator.apply.workcopy import WorkingCopy
    from orchestrator.config import Settings


@click.command("apply")
@click.argument("task_id")
@click.option(
    "--show",
    is_flag=True,
    help="Print the change set's review (its sha256, every path, the escaped diff) and "
    "apply nothing.",
)
@click.option(
    "--hash",
    "sha256",
    metavar="sha256:HEX",
    default=None,
    help="Apply without asking, only if the change set is still the one with this sha256 "
    "(as --show prints it); else nothing is applied and the error says it changed.",
)
def apply_command(task_id: str, show: bool, sha256: str | None) -> None:
    """Review TASK_ID's waiting change set and apply it to its workspace.

    On a terminal the review (the change set's sha256 and its escaped diff) is paged
    and your yes applies exactly the change set that hash names. Without a terminal,
    --show prints the review and --hash sha256:HEX applies it only if it still has
    that hash. The apply is a three-way merge against what the workspace holds now,
    each file written atomically, the content as it was recorded when the subagent
    ended. Conflicts are shown and nothing is written; the change set keeps waiting
    (resolve, then apply again). Exit 1 when nothing was applied (a conflict, or
    your no); 2 for a change set policy rejected, no such task, a hash that is not
    the change set's, or no terminal and no --hash."""
    from orchestrator.apply.pending import normalise_hash, waiting_change_set
    from orchestrator.apply.render import render_change_set
    from orchestrator.apply.review import load_decision
    from orchestrator.apply.workcopy import content_store
    from orchestrator.config import Settings

    settings = Settings.from_env()
    copy, change_set = waiting_change_set(settings.state_dir, task_id)
    if sha256 is not None:
        sha256 = normalise_hash(sha256)
    view = render_change_set(change_set, content_store(settings.state_dir))  # RenderError: 2
    decision = load_decision(copy)
    if show:
        click.echo(view.text(), nl=False)
        _status(task_id, decision, view.sha256)
        return
    if sha256 is None:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            click.echo(view.text(), nl=False)
            click.echo(
                f"warden: nothing applied: without a terminal a yes must name what was "
                f"reviewed: warden apply {task_id} --hash sha256:{view.sha256}",
                err=True,
            )
            raise SystemExit(2)
        sha256 = _ask(copy, change_set, content_store(settings.state_dir))
        if sha256 is None:
            click.echo(f"not applied; the change set of {task_id} keeps waiting")
            raise SystemExit(1)
    else:
        for line in view.header():
            click.echo(line)
    _apply(settings, task_id, sha256, copy.record.workspace)


def _apply(settings: Settings, task_id: str, sha256: str, workspace: str) -> None:
    from orchestrator.apply.pending import apply_pending
    from orchestrator.apply.policy import ApplyPolicy
    from orchestrator.apply.review import audit_to
    from orchestrator.lifecycle.recovery import open_store
    from orchestrator.workspace.settings import apply_caps

    # the settings files' warden.apply caps hold here as in the run (the stricter wins)
    max_file, max_binary = apply_caps(settings, Path(workspace)).hold(
        settings.apply_max_file, settings.apply_max_binary
    )
    policy = ApplyPolicy(max_binary_bytes=max_binary, max_file_bytes=max_file)
    with open_store(settings) as store:  # an ApplyError (changed, rejected) exits 2
        decision = apply_pending(
            settings.state_dir,
            task_id,
            f"cli:{getpass.getuser()}",
            sha256=sha256,
            policy=policy,
            recorder=audit_to(store),
        )
    report(decision, workspace)
    if decision.outcome != "applied":
        raise SystemExit(1)


def _status(task_id: str, decision: ApplyDecision | None, sha256: str) -> None:
    from orchestrator.untrusted_text import printable

    if decision is not None and decision.outcome == "rejected_by_policy":
        click.echo(f"rejected by policy (it cannot be applied): warden discard {task_id}")
        for reason in decision.reasons:
            click.echo(f"  {printable(reason.path or '(all)')}: {printable(reason.reason)}")
        return
    click.echo(f"to apply exactly this change set: warden apply {task_id} --hash sha256:{sha256}")


def _ask(copy: WorkingCopy, change_set: ChangeSet, store: ContentStore) -> str | None:
    """The run's terminal review (`ui.review_prompt`: the same pager, wrapping and
    question): the sha256 the person said yes to, or None."""
    from orchestrator.apply.changeset import ApplyReview
    from orchestrator.ui.review_prompt import review_on_terminal
    from orchestrator.untrusted_text import printable

    record = copy.record
    review = ApplyReview.of(
        change_set, store, task_id=record.task_id, agent_type=record.agent,
        run_id=record.run_id, description="", chain=(record.task_id,),
        reason="waiting for warden apply", asked_by="warden apply",
    )  # fmt: skip
    answer = asyncio.run(
        review_on_terminal(
            review,
            sys.stdin,
            sys.stdout,
            getpass.getuser(),
            target=printable(record.workspace, None),
        )
    )
    return answer.bound_to if answer.behavior == "allow" and answer.bound_to else None


@click.command("discard")
@click.argument("task_id")
def discard_command(task_id: str) -> None:
    """Remove TASK_ID's waiting change set and its working copy (the workspace is
    not touched)."""
    from orchestrator.apply.pending import discard_pending
    from orchestrator.config import Settings

    copy = discard_pending(Settings.from_env().state_dir, task_id)
    click.echo(f"discarded the change set of {task_id} ({copy.record.workspace} unchanged)")


def report(decision: ApplyDecision, workspace: str) -> None:
    from orchestrator.untrusted_text import printable

    if decision.outcome == "applied":
        click.echo(f"applied {len(decision.applied)} path(s) to {workspace}")
    for reason in decision.reasons:
        click.echo(f"  {printable(reason.path or '(all)')}: {printable(reason.reason)}")
    if decision.outcome == "conflicted":
        click.echo(
            f"conflicts: nothing was written; resolve them in {workspace}, then "
            f"warden apply {decision.task_id} again (or warden discard {decision.task_id})",
            err=True,
        )


def list_pending(json_mode: bool) -> None:
    """`warden ps --pending`: every waiting change set, oldest first."""
    from orchestrator.apply.pending import pending
    from orchestrator.commands._common import age, emit_json
    from orchestrator.config import Settings
    from orchestrator.untrusted_text import printable

    found = pending(Settings.from_env().state_dir)
    if json_mode:
        for item in found:
            emit_json(
                {
                    "task_id": item.copy.record.task_id,
                    "run_id": item.copy.record.run_id,
                    "agent": item.copy.record.agent,
                    "workspace": item.copy.record.workspace,
                    "outcome": item.decision.outcome if item.decision else None,
                    "sha256": item.change_set.sha256 if item.change_set else None,
                    "paths": [c.path for c in item.change_set.changes] if item.change_set else [],
                }
            )
        return
    if not found:
        click.echo("no change sets wait (isolation: worktree)")
        return
    for item in found:
        record = item.copy.record
        outcome = item.decision.outcome if item.decision else "undecided"
        sha = item.change_set.sha256[:12] if item.change_set else "-"
        count = len(item.change_set.changes) if item.change_set else 0
        click.echo(
            f"{record.task_id}  {outcome:<18} {sha}  {count} path(s)  "
            f"{age(record.created)}  {printable(record.agent)}  {record.workspace}"
        )
        for reason in (item.decision.reasons if item.decision else ())[:5]:
            click.echo(f"    {printable(reason.path or '(all)')}: {printable(reason.reason)}")
