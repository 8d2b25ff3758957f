"""A reviewed apply of a run's held changes (`workspace.held_changes`): what a run
wrote to files editors, shells and package managers execute was put back at the
end of the run and its version kept in `state/runs/RUN/held/`; here a person sees
it as a change set and applies exactly that, or discards it.

The change set is built from the workspace as it is now (each path's current file,
link or absence: the old side) and the run's held versions (the new side), both
kept in the content store, so the review (`apply.render`, every name and line
escaped) and the yes name one `sha256` that binds every path, mode, link target
and content hash. Applying takes that hash: the change set is computed again and
must hash the same (anything that moved since, in the workspace or in `held/`,
changes the hash and nothing is written), and each file is checked again to still
hold its old side just before it is replaced (beneath the workspace, no link
followed, atomically). The decision goes to the run's audit (tool `Apply`), and
the run's record of its held changes says what became of them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from orchestrator.apply.changeset import (
    APPLY_TOOL,
    ApplyDecision,
    ApplyError,
    ChangeSet,
    ContentStore,
    FileChange,
    PathReason,
)
from orchestrator.apply.review import ApplyLock, Recorder
from orchestrator.apply.workcopy import content_store
from orchestrator.store import Store
from orchestrator.store.records import audit_record
from orchestrator.workspace.held_changes import (
    HeldChange,
    HeldManifest,
    Present,
    load_manifest,
    present,
    replace,
    save_manifest,
)

MAX_HELD_BYTES = 64 * 1024 * 1024
"""Largest file read for a held change's review (either side)."""
HELD_DIR = "held"


class NoHeldChangesError(ApplyError, LookupError):
    """The run has no held changes waiting (none held, or already applied/discarded)."""


class HeldChangedError(ApplyError, ValueError):
    """What would be applied is not what the person was shown (its hash differs)."""


@dataclass(frozen=True)
class HeldReview:
    """One run's held changes as a change set, ready to show and to apply."""

    manifest: HeldManifest
    change_set: ChangeSet
    store: ContentStore
    sides: dict[str, tuple[Present, Present]]
    """path → (the workspace now, the run's version)."""


def held_dir(state_dir: Path, run_id: str) -> Path:
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise NoHeldChangesError(f"{run_id!r} is not a run id (warden held lists them)")
    return state_dir / "runs" / run_id / HELD_DIR


def waiting(state_dir: Path) -> list[HeldManifest]:
    """Every run whose held changes wait for a review, oldest record first."""
    found: list[tuple[float, HeldManifest]] = []
    runs = state_dir / "runs"
    for home in runs.iterdir() if runs.is_dir() else ():
        manifest = load_manifest(home / HELD_DIR)
        if manifest is not None and manifest.outcome == "waiting":
            found.append((os.stat(home).st_mtime, manifest))
    return [m for _, m in sorted(found, key=lambda tm: tm[0])]


def _run_version(root: Path, held: HeldChange) -> Present:
    """The run's version of `rel` in `held/` (a `.link` file holds a link's target),
    with the mode the run gave it."""
    rel, kept_as = held.path, held.kept_as
    if kept_as is None:
        return Present("absent")
    link = Path(kept_as).name == Path(rel).name + ".link"
    path = root / (rel + ".link" if link else rel)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_HELD_BYTES:
            raise NoHeldChangesError(f"{path}: not a regular file of at most {MAX_HELD_BYTES} B")
        data = f.read()
    if link:
        return Present("link", link=data.decode("utf-8", "replace").removesuffix("\n"))
    return Present("file", data=data, mode=held.mode if held.mode is not None else 0o644)


def _entry(side: Present) -> str | None:
    return {"file": "file", "link": "symlink"}.get(side.kind)


def _binary(data: bytes | None) -> bool:
    if data is None:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return b"\0" in data


def _change(rel: str, old: Present, new: Present, store: ContentStore) -> FileChange:
    kind = (
        "symlink" if "link" in (old.kind, new.kind) and new.kind != "absent"
        else "added" if old.kind == "absent"
        else "removed" if new.kind == "absent"
        else "modified"
    )  # fmt: skip
    return FileChange(
        path=rel,
        kind=kind,  # type: ignore[arg-type]
        old_type=_entry(old),  # type: ignore[arg-type]
        new_type=_entry(new),  # type: ignore[arg-type]
        old_sha256=store.put(old.data) if old.data is not None else None,
        new_sha256=store.put(new.data) if new.data is not None else None,
        old_mode=old.mode if old.kind == "file" else None,
        new_mode=new.mode if new.kind == "file" else None,
        binary=_binary(new.data if new.kind != "absent" else old.data),
        old_size=len(old.data) if old.data is not None else None,
        new_size=len(new.data) if new.data is not None else None,
        old_link_target=old.link,
        link_target=new.link,
    )


def review(state_dir: Path, run_id: str) -> HeldReview:
    """`run_id`'s held changes as a change set against the workspace now. Raises
    NoHeldChangesError when none wait."""
    root = held_dir(state_dir, run_id)
    manifest = load_manifest(root)
    if manifest is None or manifest.outcome != "waiting" or not manifest.changes:
        what = "none" if manifest is None else manifest.outcome
        raise NoHeldChangesError(
            f"run {run_id} has no held changes waiting ({what}); `warden held` lists those that do"
        )
    store = content_store(state_dir)
    workspace = Path(manifest.workspace)
    sides: dict[str, tuple[Present, Present]] = {}
    changes: list[FileChange] = []
    for held in sorted(manifest.changes, key=lambda h: h.path):
        old = present(workspace, held.path, MAX_HELD_BYTES)
        if old.kind == "other":
            raise HeldChangedError(
                f"{held.path} in {workspace} is neither a file, a link nor absent now (or is "
                "under a link, or too large): move it aside, then review again"
            )
        new = _run_version(root, held)
        sides[held.path] = (old, new)
        if old != new:
            changes.append(_change(held.path, old, new, store))
    change_set = ChangeSet(
        run_id=run_id,
        task_id=f"held-{run_id}",
        agent="the run's sandboxes",
        base=f"the workspace now: {workspace}",
        changes=tuple(changes),
    )
    return HeldReview(manifest, change_set, store, sides)


def apply_held(
    state_dir: Path, run_id: str, sha256: str, decided_by: str, recorder: Recorder
) -> ApplyDecision:
    """Write `run_id`'s held changes into its workspace, when they are still exactly
    the change set `sha256` names (see the module doc). Raises HeldChangedError
    (nothing written) when they are not; a file that changes under the apply itself
    stops it there, and the decision says which paths were written."""
    with ApplyLock(state_dir):
        found = review(state_dir, run_id)
        if found.change_set.sha256 != sha256:
            raise HeldChangedError(
                f"the held changes of run {run_id} are change set "
                f"{found.change_set.sha256[:12]} now, not {sha256[:12]}: the workspace or "
                "the held versions changed since you saw them; nothing was written. "
                f"Review again: warden held {run_id} --apply"
            )
        workspace = Path(found.manifest.workspace)
        applied: list[str] = []
        reasons: list[PathReason] = []
        for change in found.change_set.changes:
            old, new = found.sides[change.path]
            try:
                replace(workspace, change.path, old, new, MAX_HELD_BYTES)
            except OSError as exc:
                reasons.append(
                    PathReason(path=change.path, reason=f"not written ({exc}); later ones neither")
                )
                break
            applied.append(change.path)
        whole = not reasons
        decision = ApplyDecision(
            task_id=found.change_set.task_id,
            change_set_sha256=sha256,
            outcome="applied" if whole else "conflicted",
            decided_by=decided_by,
            applied=tuple(applied),
            reasons=tuple(reasons),
            conflicts=tuple(r.path for r in reasons),
        )
        recorder(found.change_set, decision)
        if whole:
            _settle(state_dir, found.manifest, "applied", decided_by, sha256)
        return decision


def discard_held(state_dir: Path, run_id: str, decided_by: str, recorder: Recorder) -> int:
    """Mark `run_id`'s held changes discarded (the workspace keeps what it has; the
    held versions stay in `held/` for the record); how many there were."""
    with ApplyLock(state_dir):
        found = review(state_dir, run_id)
        decision = ApplyDecision(
            task_id=found.change_set.task_id,
            change_set_sha256=found.change_set.sha256,
            outcome="rejected_by_person",
            decided_by=decided_by,
        )
        recorder(found.change_set, decision)
        _settle(state_dir, found.manifest, "discarded", decided_by, found.change_set.sha256)
        return len(found.manifest.changes)


def audit_held(store: Store) -> Recorder:
    """A `Recorder` writing a held-changes decision to the run's audit: tool `Apply`,
    source `held`, no task (the run's sandboxes wrote them), bound to the hash."""

    def write(change_set: ChangeSet, decision: ApplyDecision) -> None:
        applied = decision.outcome == "applied"
        store.record_audit(
            audit_record(
                run_id=change_set.run_id,
                agent_type="held changes",
                tool_name=APPLY_TOOL,
                tool_input=change_set.summary(),
                digest=change_set.sha256,
                decision="ask",
                final="allow" if applied else "deny",
                decided_by=decision.decided_by,
                source="held",
                reason="; ".join(f"{r.path}: {r.reason}" for r in decision.reasons)
                or ("applied as shown" if applied else f"{decision.outcome}"),
                noted={"outcome": decision.outcome, "applied": list(decision.applied)},
            )
        )

    return write


def _settle(state_dir: Path, manifest: HeldManifest, outcome: str, by: str, sha: str) -> None:
    update = {"outcome": outcome, "decided_by": by, "sha256": sha}
    save_manifest(held_dir(state_dir, manifest.run_id), manifest.model_copy(update=update))
