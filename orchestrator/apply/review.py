"""One run's reviewed apply: working copies for the tasks that ask for
`isolation: worktree`, and, when such a task ends, its change set computed,
decided by policy, offered (or not, by `--apply`), applied and recorded.

The order is fixed: policy first (a rejected change set is never shown to anyone
as something to approve), then the person (`--apply ask`, through the run's
approver hub as an `ApplyReview`), then the merge. Whatever is not applied stays:
the copy and its records wait under the state dir for `warden apply TASK` or
`warden discard TASK`. Applies (of this run, and of `warden apply` in another
process) take one lock, so two change sets never merge into the workspace at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.apply.changeset import (
    ApplyDecision,
    ApplyReview,
    ChangeSet,
    ContentStore,
    Outcome,
    PathReason,
)
from orchestrator.apply.compute import compute_change_set
from orchestrator.apply.hook import pre_apply_verdict
from orchestrator.apply.merge import apply_change_set
from orchestrator.apply.policy import ApplyPolicy, EditDecider, decide, edit_rules
from orchestrator.apply.workcopy import (
    WorkingCopy,
    WorkingCopyError,
    apply_root,
    content_store,
    dump_json,
    make_working_copy,
    store_writing,
)
from orchestrator.permissions.approvers import ApprovalAnswer, Approver, NonInteractiveApprover
from orchestrator.permissions.hooks import HookSandbox, HookSet
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.store import Store
from orchestrator.store.records import audit_record

log = logging.getLogger(__name__)

ApplyMode = Literal["ask", "auto", "never"]
"""`ask`: a person reviews what policy passes; `auto`: what policy passes is applied
without a person (CI); `never`: everything waits (`warden apply TASK`)."""
CHANGES_FILE = "changes.json"
DECISION_FILE = "decision.json"
LOCK_FILE = "apply.lock"

NOBODY = ("non-interactive", "no approver", "stopped", "approver error")
"""Answers no person gave: the change set waits instead of being rejected."""

Recorder = Callable[[ChangeSet, ApplyDecision], None]
"""Writes one decision to the run's audit (blocking; called from a worker thread)."""


@dataclass(frozen=True)
class ApplySettings:
    """How a run treats its isolated subagents' changes."""

    mode: ApplyMode = "ask"
    policy: ApplyPolicy = field(default_factory=ApplyPolicy)
    isolation: Literal["worktree"] | None = None
    """The run's default isolation (`warden run --isolation worktree`)."""


def load_change_set(copy: WorkingCopy) -> ChangeSet | None:
    try:
        return ChangeSet.model_validate_json((copy.home / CHANGES_FILE).read_bytes())
    except FileNotFoundError:
        return None


def load_decision(copy: WorkingCopy) -> ApplyDecision | None:
    try:
        return ApplyDecision.model_validate_json((copy.home / DECISION_FILE).read_bytes())
    except FileNotFoundError:
        return None


def compute_recorded(copy: WorkingCopy, store: ContentStore, state_dir: Path) -> ChangeSet:
    """The copy's change set, computed and written beside it (`changes.json`) before
    anyone is asked: the content it names is referenced on disk from the moment it is
    in the store (pruning keeps it), and a run that dies meanwhile leaves it waiting."""
    with store_writing(state_dir):
        change_set, _ = compute_change_set(copy, store)
        if change_set.changes:
            dump_json(copy.home / CHANGES_FILE, change_set.model_dump(mode="json"))
    return change_set


def record(copy: WorkingCopy, change_set: ChangeSet, decision: ApplyDecision) -> None:
    dump_json(copy.home / CHANGES_FILE, change_set.model_dump(mode="json"))
    dump_json(copy.home / DECISION_FILE, decision.model_dump(mode="json"))


def audit_to(store: Store) -> Recorder:
    """A `Recorder` writing each decision as an audit record of tool `Apply`, bound to
    the change set's hash (`warden audit` lists it with the tool calls)."""

    def write(change_set: ChangeSet, decision: ApplyDecision) -> None:
        applied = decision.outcome == "applied"
        store.record_audit(
            audit_record(
                run_id=change_set.run_id,
                task_id=change_set.task_id,
                agent_type=change_set.agent,
                tool_name="Apply",
                tool_input=change_set.summary(),
                digest=change_set.sha256,
                decision="deny"
                if decision.outcome == "rejected_by_policy"
                else ("allow" if decision.decided_by == "auto" else "ask"),
                final="allow" if applied else "deny",
                decided_by=decision.decided_by,
                source="apply",
                reason="; ".join(f"{r.path or '(all)'}: {r.reason}" for r in decision.reasons),
                noted={
                    "outcome": decision.outcome,
                    "applied": list(decision.applied),
                    "conflicts": list(decision.conflicts),
                },
            )
        )

    return write


def unbound_yes(answer: ApprovalAnswer, change_set: ChangeSet) -> str:
    """Why an allow does not count as a yes to `change_set` (empty: it does). A yes
    covers exactly the content the person saw: it must name the change set's sha256
    (`ApprovalAnswer.bound_to`); an allow that names nothing (a library callback that
    knows nothing of reviews) or another change set (a stale review) is a no."""
    if answer.bound_to == change_set.sha256:
        return ""
    if not answer.bound_to:
        return (
            "the answer allowed it without naming the change set it approved: a yes to an "
            "apply review must set bound_to to the change set's sha256 "
            f"({change_set.sha256}), so it counts as a no; review it with warden apply "
            f"{change_set.task_id}"
        )
    return (
        f"the answer named another change set ({answer.bound_to[:64]!r}, not "
        f"{change_set.sha256}): a stale review counts as a no; review it again with "
        f"warden apply {change_set.task_id}"
    )


class ApplyLock:
    """The one lock every apply into any workspace takes (an `flock` on a file in the
    host-private apply directory: no sandbox can hold it)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = apply_root(state_dir) / LOCK_FILE

    def __enter__(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


def merge_into_workspace(
    copy: WorkingCopy, change_set: ChangeSet, store: ContentStore, state_dir: Path, decided_by: str
) -> ApplyDecision:
    """Apply the reviewed `change_set` to the copy's workspace now (blocking)."""
    with ApplyLock(state_dir):
        try:
            fd = os.open(copy.record.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise WorkingCopyError(
                f"{copy.record.workspace}, where the change set of {change_set.task_id} "
                f"applies, cannot be opened ({exc.strerror or exc}): a nested task's parent "
                f"copy that was applied or discarded first? warden discard {change_set.task_id}"
            ) from exc
        try:
            result = apply_change_set(change_set, fd, store)
        finally:
            os.close(fd)
    if result.conflicts:
        return ApplyDecision(
            task_id=change_set.task_id,
            change_set_sha256=change_set.sha256,
            outcome="conflicted",
            reasons=result.conflicts,
            decided_by=decided_by,
            applied=result.applied,
            conflicts=tuple(c.path for c in result.conflicts),
        )
    return ApplyDecision(
        task_id=change_set.task_id,
        change_set_sha256=change_set.sha256,
        outcome="applied",
        decided_by=decided_by,
        applied=result.applied,
        reasons=tuple(
            PathReason(path=p, reason="merged with the workspace's own changes", rule="merge")
            for p in result.merged
        ),
    )


class ReviewedApply:
    """The reviewed apply of one run (made by `runtime.session`)."""

    def __init__(
        self,
        *,
        workspace: Path,
        state_dir: Path,
        settings: ApplySettings,
        approver: Approver | None = None,
        edit: EditDecider | None = None,
        recorder: Recorder | None = None,
        hooks: HookSet | None = None,
        hook_sandbox: HookSandbox | None = None,
    ) -> None:
        self.workspace = workspace
        self.state_dir = state_dir
        self.settings = settings
        self.approver = approver or NonInteractiveApprover()
        self.edit = edit
        self.recorder = recorder
        self.hooks = hooks
        """The run's hooks: its `PreApply` ones check a change set after policy."""
        self.hook_sandbox = hook_sandbox
        self.store = content_store(state_dir)

    def wants_copy(self, *asked: str | None) -> bool:
        """Whether a task runs in its own copy: the Task call's `isolation`, else its
        agent file's, else the run's default."""
        chosen = next((a for a in asked if a is not None), self.settings.isolation)
        return chosen == "worktree"

    def make_copy(
        self,
        *,
        run_id: str,
        task_id: str,
        agent: str,
        session: str,
        owner: tuple[int, int],
        source: Path | None = None,
    ) -> WorkingCopy:
        """The task's working copy (blocking: call it from a worker thread): of the
        shared workspace, or of `source` (the working copy of the isolated task it
        was started inside, which its change set is then applied to)."""
        return make_working_copy(
            source or self.workspace,
            self.state_dir,
            run_id=run_id,
            task_id=task_id,
            agent=agent,
            session=session,
            owner=owner,
        )

    async def conclude(
        self,
        copy: WorkingCopy,
        *,
        completed: bool,
        question: dict[str, object],
        nested: bool = False,
        rules: EffectivePolicy | None = None,
    ) -> ApplyDecision | None:
        """Decide and (maybe) apply the change set of an ended task; None when it
        changed nothing (its copy is removed). `completed`: it ended on its own (a
        killed or failed task's changes are kept pending, never applied or offered).
        `question`: the `ApprovalQuestion` fields naming the task for a review.
        `nested`: its copy was made from its parent task's copy: what policy passes
        is merged into that copy without a person, and reviewed as part of the
        parent's change set (`--apply never` still keeps it waiting). `rules`: the
        policy the task ran under (its agent's mode, its parent's narrowing); every
        path is decided as an `Edit` call of that task would be (None: `self.edit`,
        the run's)."""
        change_set = await asyncio.to_thread(compute_recorded, copy, self.store, self.state_dir)
        if not change_set.changes:
            await asyncio.to_thread(copy.remove)
            return None
        edit = self.edit if rules is None else edit_rules(rules, self.workspace)
        reasons = await asyncio.to_thread(decide, change_set, self.settings.policy, edit)
        asks: tuple[PathReason, ...] = ()
        if not reasons and self.hooks is not None:
            verdict = await pre_apply_verdict(
                self.hooks, change_set, workspace=self.workspace, sandbox=self.hook_sandbox
            )
            reasons, asks = verdict.blocks, verdict.asks
        if reasons:
            decision = self._decided(change_set, "rejected_by_policy", "policy", reasons)
        elif not completed:
            why = PathReason(path="", reason="the task did not end on its own", rule="pending")
            decision = self._decided(change_set, "pending", "warden", (why, *asks))
        elif self.settings.mode == "never":
            decision = self._decided(change_set, "pending", "never", asks)
        elif self.settings.mode == "auto" and not asks:
            decision = await self._merge(copy, change_set, "auto")
        elif nested and not asks:  # a person reviews it with the parent's change set
            decision = await self._merge(copy, change_set, "into its parent's copy")
        else:  # `ask`, or a PreApply hook asked for a person even under `auto`
            decision = await self._review(copy, change_set, question, asks)
        await asyncio.to_thread(self._keep, copy, change_set, decision)
        return decision

    async def _review(
        self,
        copy: WorkingCopy,
        change_set: ChangeSet,
        question: dict[str, object],
        asks: tuple[PathReason, ...] = (),
    ) -> ApplyDecision:
        reason = "its subagent ran in its own working copy; these are its changes"
        if asks:
            reason += "; a PreApply hook asks a person: " + "; ".join(a.reason for a in asks)
        review = ApplyReview.of(
            change_set,
            self.store,
            reason=reason,
            **question,
        )
        try:
            answer = await self.approver.approve(review)
        except Exception as exc:  # a failing approver never applies
            log.warning("apply review of %s failed: %r", change_set.task_id, exc)
            answer = ApprovalAnswer(behavior="deny", reason=str(exc), channel="approver error")
        if answer.behavior == "allow" and (unbound := unbound_yes(answer, change_set)):
            why = PathReason(path="", reason=unbound, rule="review")
            return self._decided(change_set, "rejected_by_person", answer.decided_by, (why,))
        if answer.behavior != "allow" and answer.channel in NOBODY:
            why = PathReason(path="", reason="nobody could review it", rule="review")
            return self._decided(change_set, "pending", answer.decided_by, (why, *asks))
        if answer.behavior != "allow":
            why = PathReason(path="", reason=answer.reason or "the reviewer said no", rule="review")
            return self._decided(change_set, "rejected_by_person", answer.decided_by, (why,))
        return await self._merge(copy, change_set, answer.decided_by)

    async def _merge(self, copy: WorkingCopy, change_set: ChangeSet, who: str) -> ApplyDecision:
        return await asyncio.to_thread(
            merge_into_workspace, copy, change_set, self.store, self.state_dir, who
        )

    def _decided(
        self,
        change_set: ChangeSet,
        outcome: Outcome,
        who: str,
        reasons: tuple[PathReason, ...] = (),
    ) -> ApplyDecision:
        return ApplyDecision(
            task_id=change_set.task_id,
            change_set_sha256=change_set.sha256,
            outcome=outcome,
            reasons=reasons,
            decided_by=who,
        )

    def _keep(self, copy: WorkingCopy, change_set: ChangeSet, decision: ApplyDecision) -> None:
        """Record the decision (audit, and beside a copy that stays); an applied copy goes."""
        if self.recorder is not None:
            try:
                self.recorder(change_set, decision)
            except Exception:
                log.exception("could not audit the apply decision of %s", change_set.task_id)
        if decision.outcome == "applied":
            copy.remove()  # the audit keeps the account; nothing of it is left to apply
        else:
            record(copy, change_set, decision)
