"""A working copy's change set: its tree as the subagent left it against the tree
it started from, both read on the host without following anything
(`apply.tree`); the new content is copied into the content store as it is read.

A submodule's pointer cannot move inside a sandbox (the repository, `.git/modules`
included, is read-only there), so a change under a submodule shows as the files
it touches; a changed `.git` file of one is a change to a protected path.

Empty directories are not changes of their own (a directory is known by what it
holds), except where the subagent put a file or link in place of one, or in place
of a directory above one: that empty directory is the change's old side
(`old_type` "dir"), so the apply knows the copy started with it there.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.apply.changeset import ChangeSet, ContentStore, FileChange
from orchestrator.apply.tree import Entry, Tree
from orchestrator.apply.workcopy import WorkingCopy, read_copy

DEFAULT_STORE_LIMIT = 64 << 20
"""Largest new file kept for review and apply (larger ones are hashed, refused)."""


def compute_change_set(
    copy: WorkingCopy, store: ContentStore, *, store_limit: int = DEFAULT_STORE_LIMIT
) -> tuple[ChangeSet, Tree]:
    """The change set of `copy` now, and the tree it was computed from."""
    after = read_copy(copy, store, store_limit=store_limit)
    changes = diff_trees(
        copy.record.base_tree(), after.entries, before_empty_dirs=copy.record.base_empty_dirs
    )
    change_set = ChangeSet(
        run_id=copy.record.run_id,
        task_id=copy.record.task_id,
        agent=copy.record.agent,
        base=copy.record.base,
        changes=changes,
    )
    return change_set, after


def diff_trees(
    before: dict[str, Entry],
    after: dict[str, Entry],
    *,
    before_empty_dirs: Iterable[str] = (),
) -> tuple[FileChange, ...]:
    """One `FileChange` per path that differs, sorted by path. `before_empty_dirs`:
    the empty directories `before` had; one that a file or link took the place of
    (itself or a directory above it) is a change from "dir"."""
    replaced = {d for d in before_empty_dirs if _taken(d, after)}
    out = []
    for path in sorted(before.keys() | after.keys() | replaced):
        change = _change(path, before.get(path), after.get(path), was_dir=path in replaced)
        if change is not None:
            out.append(change)
    return tuple(out)


def _taken(empty_dir: str, after: dict[str, Entry]) -> bool:
    """Whether a file or link is now at `empty_dir` or at a directory above it."""
    parts = empty_dir.split("/")
    return any("/".join(parts[:i]) in after for i in range(1, len(parts) + 1))


def _change(
    path: str, old: Entry | None, new: Entry | None, *, was_dir: bool = False
) -> FileChange | None:
    if was_dir:
        return _from_empty_dir(path, new)
    if old == new or (
        old is not None
        and new is not None
        and (old.type, old.mode, old.sha256, old.link_target)
        == (new.type, new.mode, new.sha256, new.link_target)
    ):
        return None
    fields: dict[str, object] = {"path": path}
    if old is not None:
        fields |= {
            "old_type": old.type,
            "old_sha256": old.sha256,
            "old_mode": old.mode if old.type == "file" else None,
            "old_size": old.size if old.type == "file" else None,
            "old_link_target": old.link_target,
        }
    if new is not None:
        fields |= _new_side(new)
    elif old is not None:
        fields["binary"] = old.binary
    if new is None:
        kind = "removed"
    elif new.type == "symlink":
        kind = "symlink"
    elif old is None or old.type != "file":
        kind = "added"
    elif old.sha256 == new.sha256:
        kind = "mode_changed"
    else:
        kind = "modified"
    fields["kind"] = kind
    return FileChange.model_validate(fields)


def _from_empty_dir(path: str, new: Entry | None) -> FileChange:
    """An empty directory the subagent replaced by `new` (None: removed with the
    directory above it that a file or link replaced)."""
    fields: dict[str, object] = {"path": path, "old_type": "dir", "kind": "removed"}
    if new is not None:
        fields |= {"kind": "symlink" if new.type == "symlink" else "added", **_new_side(new)}
    return FileChange.model_validate(fields)


def _new_side(new: Entry) -> dict[str, object]:
    """A change's fields that describe what the subagent's copy has at its path."""
    return {
        "new_type": new.type,
        "new_sha256": new.sha256,
        "new_mode": new.mode if new.type == "file" else None,
        "new_size": new.size if new.type == "file" else None,
        "link_target": new.link_target,
        "binary": new.binary,
        "stored": new.stored or new.type != "file",
        "hard_link": new.hard_link,
    }
