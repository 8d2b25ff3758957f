"""Change sets that wait: listed by `warden ps --pending`, applied by `warden apply
TASK` (the person's explicit yes, from the change set as it was recorded and its
content from the store), removed by `warden discard TASK`.

A change set policy rejected is never applied from here (policy is not a person's
to overrule at the command line: change the policy and run the task again).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.apply.changeset import (
    SHA256_RE,
    ApplyDecision,
    ApplyError,
    ChangeSet,
    PathReason,
)
from orchestrator.apply.policy import ApplyPolicy, decide
from orchestrator.apply.review import (
    Recorder,
    compute_recorded,
    load_change_set,
    load_decision,
    merge_into_workspace,
    record,
)
from orchestrator.apply.workcopy import (
    COPY_META,
    WorkingCopy,
    apply_root,
    content_store,
)

log = logging.getLogger(__name__)

TASK_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


class NoSuchChangeSetError(ApplyError, LookupError):
    """No working copy is kept for that task id."""


class RejectedChangeSetError(ApplyError, PermissionError):
    """The change set was rejected by policy: it cannot be applied."""


class ChangedChangeSetError(ApplyError, ValueError):
    """The change set is not the one the person's yes named (it changed since it was
    shown, or the hash is mistyped): review it again (`warden apply TASK --show`)."""


class StillDecidingError(ApplyError, RuntimeError):
    """The task's run is still running it or deciding its change set: wait for it."""


@dataclass(frozen=True)
class Pending:
    copy: WorkingCopy
    change_set: ChangeSet | None
    """None: the run ended before it computed one (a crash); `warden apply` computes it."""
    decision: ApplyDecision | None


def pending(state_dir: Path) -> list[Pending]:
    """Every kept working copy, oldest first."""
    root = apply_root(state_dir)
    found = []
    for home in sorted(root.iterdir()):
        if not (home / COPY_META).is_file():
            continue
        try:
            copy = WorkingCopy.load(home)
            found.append(Pending(copy, load_change_set(copy), load_decision(copy)))
        except (ApplyError, ValueError):
            continue
    return sorted(found, key=lambda p: p.copy.record.created)


def find(state_dir: Path, task_id: str) -> WorkingCopy:
    if not TASK_ID_RE.fullmatch(task_id):
        raise NoSuchChangeSetError(f"{task_id!r} is not a task id; see warden ps --pending")
    home = apply_root(state_dir) / task_id
    if not (home / COPY_META).is_file():
        raise NoSuchChangeSetError(
            f"no change set of task {task_id} is waiting; warden ps --pending lists those that are"
        )
    return WorkingCopy.load(home)


def normalise_hash(given: str) -> str:
    """`sha256:HEX` or `HEX` (the whole 64 hex digits; no prefix of them) → HEX."""
    value = given.strip().lower().removeprefix("sha256:")
    if not SHA256_RE.fullmatch(value):
        raise ChangedChangeSetError(
            f"{given[:80]!r} is not a change set's sha256: give all 64 hex digits as "
            "warden apply TASK --show prints them (sha256:…)"
        )
    return value


def owner_may_be_alive(copy: WorkingCopy) -> bool:
    """Whether the warden process that made `copy` may still be running."""
    from orchestrator.owner import Owner, is_dead

    owner = Owner.from_json(copy.record.owner or None)
    return owner is not None and not is_dead(owner)


def waiting_change_set(state_dir: Path, task_id: str) -> tuple[WorkingCopy, ChangeSet]:
    """The change set of `task_id` as `warden apply` shows and applies it. One a dead
    run left uncomputed is computed and recorded now, so what is shown is what a yes
    to its hash applies. A task still running, or whose run is still deciding its
    change set, is refused (`StillDecidingError`)."""
    copy = find(state_dir, task_id)
    change_set = load_change_set(copy)
    if load_decision(copy) is None and owner_may_be_alive(copy):
        doing = "still running" if change_set is None else "being decided by its run"
        raise StillDecidingError(
            f"the change set of {task_id} is {doing}; wait until the run has decided it "
            "(warden ps --pending shows it as waiting), then warden apply it"
        )
    if change_set is None:
        change_set = compute_recorded(copy, content_store(state_dir), state_dir)
    return copy, change_set


def apply_pending(
    state_dir: Path,
    task_id: str,
    who: str,
    *,
    sha256: str,
    policy: ApplyPolicy,
    recorder: Recorder | None = None,
) -> ApplyDecision:
    """Merge the waiting change set of `task_id` into its workspace, if it is still
    the change set `sha256` names (the person's yes covers exactly what they saw;
    else `ChangedChangeSetError`). One a crashed run left undecided is decided by
    `policy` first (without the run's Edit rules)."""
    copy, change_set = waiting_change_set(state_dir, task_id)
    store = content_store(state_dir)
    previous = load_decision(copy)
    if normalise_hash(sha256) != change_set.sha256:
        raise ChangedChangeSetError(
            f"the change set of {task_id} is now sha256:{change_set.sha256}, not the "
            f"sha256:{normalise_hash(sha256)} you named: it changed since you reviewed it, "
            f"so nothing was applied; review it again: warden apply {task_id} --show"
        )
    if previous is None and (reasons := decide(change_set, policy)):
        previous = ApplyDecision(
            task_id=task_id,
            change_set_sha256=change_set.sha256,
            outcome="rejected_by_policy",
            reasons=reasons,
            decided_by="policy",
        )
        record(copy, change_set, previous)
        if recorder is not None:
            recorder(change_set, previous)
    if previous is not None and previous.outcome == "rejected_by_policy":
        why = "; ".join(f"{r.path}: {r.reason}" for r in previous.reasons)
        raise RejectedChangeSetError(
            f"the change set of {task_id} was rejected by policy ({why}); it cannot be "
            f"applied: warden discard {task_id}"
        )
    decision = merge_into_workspace(copy, change_set, store, state_dir, who)
    if recorder is not None:
        try:
            recorder(change_set, decision)
        except Exception as exc:  # what was applied stays applied; the record says so
            log.warning("could not audit the apply of %s: %s", task_id, exc)
    if decision.outcome == "applied":
        copy.remove()
    else:
        record(copy, change_set, decision)
    return decision


def settle_leftovers(state_dir: Path) -> tuple[list[str], list[str]]:
    """The working copies a dead warden left undecided (its run crashed or was
    killed while the task ran): removed when they hold no change, else kept with a
    `pending` decision, so `warden apply`/`discard` can take them. Returns the task
    ids removed and kept. A copy whose owner may be alive is left alone."""
    from orchestrator.owner import Owner, is_dead

    removed: list[str] = []
    kept: list[str] = []
    store = content_store(state_dir)
    for item in pending(state_dir):
        if item.decision is not None:
            continue
        owner = Owner.from_json(item.copy.record.owner or None)
        if owner is None or not is_dead(owner):
            continue
        change_set = item.change_set or compute_recorded(item.copy, store, state_dir)
        if not change_set.changes:
            item.copy.remove()
            removed.append(item.copy.record.task_id)
            continue
        why = PathReason(path="", reason="its run ended before the change set was decided")
        decision = ApplyDecision(
            task_id=change_set.task_id,
            change_set_sha256=change_set.sha256,
            outcome="pending",
            reasons=(why,),
            decided_by="warden cleanup",
        )
        record(item.copy, change_set, decision)
        kept.append(item.copy.record.task_id)
    return removed, kept


def discard_pending(state_dir: Path, task_id: str) -> WorkingCopy:
    """Remove the working copy of `task_id` and its records."""
    copy = find(state_dir, task_id)
    copy.remove()
    return copy
