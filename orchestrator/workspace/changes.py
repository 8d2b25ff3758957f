"""Files each task changed, seen from the workspace itself, so writes made by Bash
(or anything else a sandbox runs) count, not only Write/Edit calls.

How: a snapshot of the workspace (type, mode, size, mtime, ctime and inode of every
file and link; ctime cannot be set from user space, so a rewrite that restores size
and mtime is still seen) is taken before a task's sandbox runs and again after it
ended; the difference is the task's. When another task of the run was running at
any moment in between, the difference may hold that task's writes too: the
attribution is then `shared`, and said so, rather than guessed.

Bounded: one snapshot visits at most `MAX_SCAN_ENTRIES` entries (depth first, names
sorted, links not followed, `.git/objects` skipped); past it the scan stops, only the
part of the tree both snapshots covered is compared, and `truncated` says so. At
most `MAX_LISTED` paths are listed per task; the count covers all. Snapshots run in
a worker thread; tasks that begin together share one.

Hand-written because it is a bounded directory walk; no library adds anything to
`os.scandir` here (`workspace.report` does the same for executed paths only, with
content hashes and a different bound).
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.workspace import beneath
from sandbox_tools.wire import WORKSPACE

MAX_SCAN_ENTRIES = 50_000
"""Directory entries one snapshot visits at most; past it the scan stops and says so."""
MAX_LISTED = 200
"""Changed paths listed per task; the rest are counted."""
SKIPPED_DIRS = frozenset({".git/objects"})
"""Workspace-relative directories not walked (content-addressed, large, never edited)."""

Attribution = Literal["sole", "shared"]
_Key = tuple[str, ...]
_Meta = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Snapshot:
    """Files and links of a workspace at one moment (directories are walked, not kept)."""

    entries: dict[_Key, _Meta]
    truncated: bool
    last: _Key | None
    """The last entry visited when the scan stopped early (None: it did not)."""


def take_snapshot(workspace: Path, *, limit: int = MAX_SCAN_ENTRIES) -> Snapshot:
    """Walk the workspace depth first in name order, without following links. Each
    directory is opened from the workspace down without following a link
    (`workspace.beneath`): one a sandbox swaps for a link mid-walk is not walked."""
    entries: dict[_Key, _Meta] = {}
    visited = 0
    stack: list[_Key] = [()]
    with beneath.workspace_root(workspace) as root:
        while stack:
            prefix = stack.pop()
            with beneath.directory(root, prefix, workspace) as fd:
                if fd is None:
                    continue
                try:
                    with os.scandir(fd) as it:  # its entries stat through `fd`
                        children = sorted(it, key=lambda e: e.name)
                    subdirs: list[_Key] = []
                    for child in children:
                        key = (*prefix, child.name)
                        if visited >= limit:
                            return Snapshot(entries, truncated=True, last=key)
                        visited += 1
                        try:
                            info = child.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(info.st_mode):
                            if "/".join(key) not in SKIPPED_DIRS:
                                subdirs.append(key)
                            continue
                        entries[key] = (
                            info.st_mode,
                            info.st_size,
                            info.st_mtime_ns,
                            info.st_ctime_ns,
                            info.st_ino,
                        )
                except OSError:
                    continue
            # Depth first in name order: the next directory to walk goes on top.
            stack.extend(reversed(subdirs))
    return Snapshot(entries, truncated=False, last=None)


@dataclass(frozen=True)
class Changes:
    """What changed in the workspace while one task ran."""

    paths: list[str]
    """Container paths (`/workspace/…`) created, modified or deleted; at most MAX_LISTED."""
    count: int
    """All changed paths, listed or not."""
    attribution: Attribution
    """`sole`: no other task ran meanwhile; `shared`: another did, its writes may be here."""
    truncated: bool
    """A snapshot hit MAX_SCAN_ENTRIES: changes past that point of the tree are not seen."""

    def event_data(self) -> dict[str, str | int | bool | list[str]]:
        """The fields a task's end event carries (read back by the result document)."""
        return {
            "files_changed": self.paths,
            "files_changed_count": self.count,
            "files_attribution": self.attribution,
            "files_scan_truncated": self.truncated,
        }


def compare(before: Snapshot, after: Snapshot) -> tuple[list[str], int]:
    """Changed container paths (sorted, at most MAX_LISTED) and their count. When a
    scan stopped early, only the part of the tree both scans covered is compared."""
    horizons = [s.last for s in (before, after) if s.last is not None]
    horizon = min(horizons) if horizons else None
    changed = [
        key
        for key in sorted(before.entries.keys() | after.entries.keys())
        if before.entries.get(key) != after.entries.get(key) and (horizon is None or key < horizon)
    ]
    return [f"{WORKSPACE}/{'/'.join(key)}" for key in changed[:MAX_LISTED]], len(changed)


@dataclass
class _Window:
    before: Snapshot
    shared: bool = False


@dataclass
class TaskChanges:
    """Snapshots around each task of a run: `begin` before its sandbox runs, `end`
    after it ended. Overlapping tasks are marked `shared`.

    Tasks that begin together share one snapshot: a snapshot still being taken when a
    task begins is as good a "before" for it (its sandbox has not started, and any
    other writer meanwhile is an open task, which makes it `shared` anyway), so a
    burst of N tasks walks the workspace once, not N times. An `end` always takes its
    own, after the task's sandbox is gone."""

    workspace: Path
    limit: int = MAX_SCAN_ENTRIES
    _open: dict[str, _Window] = field(default_factory=dict)
    _taking: asyncio.Future[Snapshot] | None = None

    async def _snapshot(self, *, share: bool) -> Snapshot:
        if not (share and self._taking is not None and not self._taking.done()):
            self._taking = asyncio.ensure_future(
                asyncio.to_thread(take_snapshot, self.workspace, limit=self.limit)
            )
        return await asyncio.shield(self._taking)

    async def begin(self, task_id: str) -> None:
        before = await self._snapshot(share=True)
        window = _Window(before, shared=bool(self._open))
        for other in self._open.values():
            other.shared = True
        self._open[task_id] = window

    async def end(self, task_id: str) -> Changes | None:
        """The task's changes; None when it never began (stopped before it ran)."""
        window = self._open.pop(task_id, None)
        if window is None:
            return None
        after = await self._snapshot(share=False)
        paths, count = compare(window.before, after)
        return Changes(
            paths=paths,
            count=count,
            attribution="shared" if window.shared else "sole",
            truncated=window.before.truncated or after.truncated,
        )
