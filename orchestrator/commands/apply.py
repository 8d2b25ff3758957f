"""`warden apply TASK` and `warden discard TASK`: a waiting change set of an
isolated subagent (`isolation: worktree`) merged into its workspace, or removed.
`warden ps --pending` lists them."""

from __future__ import annotations

import getpass

import click

from orchestrator.apply.changeset import ApplyDecision, ChangeSet


@click.command("apply")
@click.argument("task_id")
def apply_command(task_id: str) -> None:
    """Apply TASK_ID's waiting change set to its workspace: a three-way merge against
    what the workspace holds now, each file written atomically, the content as it
    was recorded when the subagent ended. Conflicts are shown and nothing is
    written; the change set keeps waiting (resolve, then apply again). Exit 1 on a
    conflict; 2 for a change set policy rejected or no such task."""
    from orchestrator.apply.pending import apply_pending, find
    from orchestrator.apply.policy import ApplyPolicy
    from orchestrator.apply.review import audit_to, load_change_set
    from orchestrator.config import Settings
    from orchestrator.lifecycle.recovery import open_store

    settings = Settings.from_env()
    copy = find(settings.state_dir, task_id)
    change_set = load_change_set(copy)
    if change_set is not None:
        show(change_set)
    policy = ApplyPolicy(
        max_binary_bytes=settings.apply_max_binary, max_file_bytes=settings.apply_max_file
    )
    with open_store(settings) as store:
        decision = apply_pending(
            settings.state_dir,
            task_id,
            f"cli:{getpass.getuser()}",
            policy=policy,
            recorder=audit_to(store),
        )
    report(decision, copy.record.workspace)
    if decision.outcome != "applied":
        raise SystemExit(1)


@click.command("discard")
@click.argument("task_id")
def discard_command(task_id: str) -> None:
    """Remove TASK_ID's waiting change set and its working copy (the workspace is
    not touched)."""
    from orchestrator.apply.pending import discard_pending
    from orchestrator.config import Settings

    copy = discard_pending(Settings.from_env().state_dir, task_id)
    click.echo(f"discarded the change set of {task_id} ({copy.record.workspace} unchanged)")


def show(change_set: ChangeSet) -> None:
    from orchestrator.untrusted_text import printable

    click.echo(f"change set {change_set.sha256[:12]} of {change_set.task_id} ({change_set.agent}):")
    for change in change_set.changes:
        size = "" if change.new_size is None else f" {change.new_size} B"
        target = f" -> {printable(change.link_target)}" if change.link_target else ""
        click.echo(f"  {change.kind:<12} {printable(change.path)}{target}{size}")


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
