"""Pruning the content store (`warden cleanup`): content no record refers to any
more is removed; content a record refers to never is.

What refers to content: every working copy's `copy.json` (its base tree: the base
of a three-way merge and the old side of a review) and `changes.json` (the new
side: what a yes applies), whatever its decision; and any JSON record a run keeps
of its held changes (`<state dir>/runs/RUN/held/`, every sha256 in it counts).
A live run's content is referenced the same way: writers hold the store lock
(shared, `workcopy.store_writing`) from putting content until the record naming it
is on disk, and pruning takes it exclusively without waiting, so it never runs
between the two (a busy store is simply not pruned this time). A record that
cannot be read stops the pruning (nothing is removed: what it names is unknown),
and content younger than a grace age is kept too (a writer that did not take the
lock still has that long to write its record; `ContentStore.put` refreshes the
age of content it finds already there).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.apply.changeset import SHA256_RE, ApplyError, ChangeSet
from orchestrator.apply.review import CHANGES_FILE
from orchestrator.apply.workcopy import CONTENT_DIR, COPY_META, CopyRecord, apply_root, store_lock

GRACE_S = 600.0
"""Content younger than this is kept even when nothing names it yet."""
HELD_GLOB = "runs/*/held/**/*.json"
"""Held-change records under the state dir whose sha256s are kept."""
_ANY_SHA = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


class PruneError(ApplyError):
    """A record could not be read, so nothing was pruned (what it names is unknown):
    fix or discard that change set (`warden discard TASK`), then clean up again."""


@dataclass
class Pruned:
    """What one pruning did."""

    removed: list[str] = field(default_factory=list)
    """sha256 of the content removed."""
    kept: int = 0
    """Entries kept (referenced, or younger than the grace age)."""
    busy: bool = False
    """A writer held the store: nothing was pruned this time."""
    freed_bytes: int = 0


def referenced(state_dir: Path) -> set[str]:
    """Every sha256 a record under `state_dir` names (PruneError: one is unreadable)."""
    found: set[str] = set()
    root = apply_root(state_dir)
    for home in root.iterdir():
        meta = home / COPY_META
        if not meta.is_file():
            continue  # a copy cut short before its record: it names nothing
        try:
            record = CopyRecord.model_validate_json(meta.read_bytes())
            found.update(str(e["sha256"]) for e in record.base_entries.values() if e.get("sha256"))
            changes = home / CHANGES_FILE
            if changes.exists():
                change_set = ChangeSet.model_validate_json(changes.read_bytes())
                for change in change_set.changes:
                    found.update(h for h in (change.old_sha256, change.new_sha256) if h)
        except (OSError, ValueError) as exc:
            raise PruneError(
                f"{home} could not be read ({exc}); nothing was pruned from the content "
                f"store: warden discard {home.name} if it is not needed"
            ) from exc
    for held in state_dir.glob(HELD_GLOB):
        try:
            found.update(_ANY_SHA.findall(json.dumps(json.loads(held.read_bytes()))))
        except (OSError, ValueError) as exc:
            raise PruneError(f"{held} could not be read ({exc}); nothing was pruned") from exc
    return found


def prune_store(state_dir: Path, *, grace_s: float = GRACE_S) -> Pruned:
    """Remove the store's content no record names and older than `grace_s`."""
    result = Pruned()
    with store_lock(state_dir, exclusive=True, wait=False) as held:
        if not held:
            result.busy = True
            return result
        keep = referenced(state_dir)
        cutoff = time.time() - grace_s
        store = apply_root(state_dir) / CONTENT_DIR
        if not store.is_dir():
            return result
        for bucket in store.iterdir():
            if not bucket.is_dir() or bucket.is_symlink():
                continue
            for entry in bucket.iterdir():
                name = entry.name
                if SHA256_RE.fullmatch(name) and name in keep:
                    result.kept += 1
                    continue
                try:
                    info = entry.lstat()
                except FileNotFoundError:
                    continue
                if info.st_mtime > cutoff:
                    result.kept += 1
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry)
                    result.freed_bytes += info.st_size
                    if SHA256_RE.fullmatch(name):
                        result.removed.append(name)
            with contextlib.suppress(OSError):
                bucket.rmdir()  # only when empty
    return result
