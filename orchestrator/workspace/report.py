"""The end-of-run report: files a run created, changed or removed under paths that
the host or a developer's tools execute.

Read-only mounts cover `.claude/`, `.git` and `--protect` paths; everything else
in the workspace is the subagents' to write, including files that run code the
next time someone types `make`, `npm test`, `git status` in a subdirectory, or
opens the folder in an editor. Those are listed at the end of every run (and
those under the rows that ask are held: `workspace.held_changes`), so a
person reviews them before trusting them: every change in the `--json` result and
the audit (none is ever dropped), and in the terminal summary at most
`MAX_PRINTED`, one per table row in turn, with the count of those not printed.
Which paths: the one table in `permissions.executed_paths`, plus the target of the
repository's `core.hooksPath` and `--protect` paths.

How: a snapshot (type, mode, size, mtime, ctime, inode, and a SHA-256 of small
files) of every entry matching `EXECUTED_PATHS` is taken before the first
sandbox starts and compared at the end. ctime cannot be set from user space,
so a rewrite that restores size and mtime is still seen. The walk is
breadth-first (root-level files first), visits at most `MAX_SCAN_ENTRIES`
entries (announced when hit), does not follow links, and inside `node_modules`
only looks at `.bin`. Hand-written because it is a plain directory walk with a
bound; no library adds anything to `os.scandir` here.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import stat
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.permissions.always_allow import own_write_digest
from orchestrator.permissions.executed_paths import hooks_path_pattern, report_patterns
from orchestrator.permissions.paths import matches, pattern_regex
from orchestrator.store.records import AuditRecord, audit_record
from orchestrator.workspace import beneath
from orchestrator.workspace.held_changes import (
    HeldChange,
    HeldManifest,
    NotHeld,
    held_rows,
    hold,
    keep_originals,
    save_manifest,
)
from orchestrator.workspace.trusted_content import TrustedFile
from orchestrator.workspace.trusted_content import changes as trust_changes
from orchestrator.workspace.trusted_content import fingerprint as trust_fingerprint

if TYPE_CHECKING:
    from orchestrator.store import Store

EXECUTED_PATHS: tuple[str, ...] = report_patterns()
"""Workspace paths (gitignore-style, from the workspace root; a pattern covers
everything under what it names) that the host or a developer's tools execute: the
rows of `permissions.executed_paths.EXECUTED_PATHS`, the one table."""

MAX_SCAN_ENTRIES = 200_000
"""Directory entries one snapshot visits at most; past it the scan stops and says so."""
HASH_MAX_BYTES = 64 * 1024
"""Files up to this size are hashed in the snapshot (larger ones compare by metadata)."""
AUDIT_TOOL_NAME = "WorkspaceChange"
"""The tool name of audit records the end-of-run report writes."""
MAX_PRINTED = 40
"""Most changes the terminal summary prints (one per table row in turn, so a change
under every row shows before a second under any); the rest are counted there, and
all are in the `--json` result and the audit."""

ChangeKind = Literal["created", "modified", "deleted"]


@dataclass(frozen=True)
class _Entry:
    kind: str
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    digest: str | None


_NONE = _Entry("absent", 0, 0, 0, 0, 0, None)
"""Stands for an entry that is gone."""


class Snapshot:
    """Executed-path entries of a workspace at one moment."""

    def __init__(self, entries: dict[str, _Entry], visited: int, truncated: bool) -> None:
        self.entries = entries
        self.visited = visited
        self.truncated = truncated


class SensitiveChange(BaseModel):
    """One file a run created, changed or removed under an executed path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """Relative to the workspace (written by a sandbox: display it as text only)."""
    change: ChangeKind
    kind: str
    """file, dir, link or other (what it is now; what it was, when deleted)."""
    size: int
    row: int = 0
    """Index of the first pattern that covers it (the table's order; extras after)."""


class SensitiveReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    changes: list[SensitiveChange]
    """Every change, none dropped (ordered by the table's rows, then by path)."""
    scan_truncated: bool = False
    """A snapshot stopped at MAX_SCAN_ENTRIES: changes deeper in the tree are not listed."""
    scan_limit: int = MAX_SCAN_ENTRIES
    held: list[HeldChange] = []
    """Changes under the asking rows put back as before the run (`workspace.held_changes`)."""
    not_held: list[NotHeld] = []
    """Changes under those rows that could not be put back, and why."""
    held_dir: str = ""
    """Where the run's versions of `held` are kept."""
    trust_review: list[str] = []
    """Files workspace trust covers (`workspace.trusted_content`) that are new, changed
    or removed since the run started: they unlock nothing until a person says yes."""

    def render(self) -> list[str]:
        """Plain-text lines for the terminal summary (empty when there is nothing to say)."""
        lines: list[str] = []
        if self.held:
            lines += _section(
                f"held for your review: {len(self.held)} change(s) this run made to files "
                "that editors, shells, commit hooks and package managers run were put back "
                f"as they were before it; its versions are in {_printable(self.held_dir)} "
                f"(`warden held {_printable(Path(self.held_dir).parent.name)}` shows the "
                "diff and applies exactly what you saw, or discards it):",
                [f"{h.change:<8} {_printable(h.path)}" for h in self.held],
                " (all in --json)",
            )
        if self.not_held:
            lines += _section(
                f"not held: {len(self.not_held)} change(s) to such files could not be put "
                "back; review them before you open the folder in an editor or run its tools:",
                [f"{_printable(n.path)}: {n.why}" for n in self.not_held],
                " (all in --json)",
            )
        if self.trust_review:
            lines += _section(
                f"needs your review before it takes effect: {len(self.trust_review)} file(s) "
                "that workspace trust covers changed during this run (`warden trust` shows "
                "the diff and records your yes):",
                [_printable(p) for p in self.trust_review],
            )
        if self.changes:
            lines += _section(
                f"review before trusting: {len(self.changes)} file(s) under "
                "paths that git, CI, editors or build tools execute were changed by this run:",
                [
                    f"{c.change:<8} {c.kind:<5} {_printable(c.path)}"
                    for c in _interleaved(self.changes)
                ],
                " not printed here (all are in `warden audit` and the --json result)",
            )
        if self.scan_truncated:
            lines.append(
                f"the executed-paths scan stopped at {self.scan_limit} entries; "
                "changes deeper in the workspace are not listed"
            )
        return lines


def _section(header: str, items: Sequence[str], rest: str = "") -> list[str]:
    """`header`, the first `MAX_PRINTED` items indented, and how many are not printed
    (then `rest`: where they all are). The one shape of every section above."""
    lines = [header, *(f"  {item}" for item in items[:MAX_PRINTED])]
    if len(items) > MAX_PRINTED:
        lines.append(f"  … and {len(items) - MAX_PRINTED} more{rest}")
    return lines


def _interleaved(changes: list[SensitiveChange]) -> list[SensitiveChange]:
    """Changes taken one per row in turn (rows in table order): 600 files under one
    row cannot push a rewritten Makefile or a new `.vscode/tasks.json` out of view."""
    by_row: dict[int, list[SensitiveChange]] = {}
    for change in changes:
        by_row.setdefault(change.row, []).append(change)
    queues = [by_row[k] for k in sorted(by_row)]
    out: list[SensitiveChange] = []
    for i in range(max(len(q) for q in queues)):
        out += [q[i] for q in queues if i < len(q)]
    return out


def _printable(text: str) -> str:
    # The one helper for container text on a terminal (paths are written by sandboxes).
    from orchestrator.untrusted_text import printable

    return printable(text, None)


def take_snapshot(
    workspace: Path, patterns: Sequence[str], *, limit: int = MAX_SCAN_ENTRIES
) -> Snapshot:
    """Walk the workspace (breadth-first, no links followed) and record what matches.
    Every directory is opened from the workspace down without following a link and
    every file from its directory's descriptor (`workspace.beneath`): a directory a
    sandbox swaps for a link mid-walk is not walked through."""
    matcher = _Matcher(patterns)
    entries: dict[str, _Entry] = {}
    queue: deque[tuple[str, ...]] = deque([()])
    visited = 0
    with beneath.workspace_root(workspace) as root:
        while queue:
            parts = queue.popleft()
            with beneath.directory(root, parts, workspace) as fd:
                if fd is None:
                    continue
                visited, truncated = _scan(fd, parts, matcher, entries, queue, visited, limit)
            if truncated:
                return Snapshot(entries, visited, truncated=True)
    return Snapshot(entries, visited, truncated=False)


def _scan(
    fd: int,
    parts: tuple[str, ...],
    matcher: _Matcher,
    entries: dict[str, _Entry],
    queue: deque[tuple[str, ...]],
    visited: int,
    limit: int,
) -> tuple[int, bool]:
    """List the directory `fd` (at `parts`): record the entries that match, queue its
    subdirectories. The entries visited so far, and whether the limit stopped it."""
    try:
        with os.scandir(fd) as it:
            children = sorted(it, key=lambda e: e.name)
    except OSError:
        return visited, False
    in_node_modules = bool(parts) and parts[-1] == "node_modules"
    for child in children:
        if visited >= limit:
            return visited, True
        visited += 1
        rel = "/" + "/".join((*parts, child.name))
        if matcher.matches(rel, child.name):
            try:
                info = child.stat(follow_symlinks=False)
            except OSError:
                continue
            if not _placeholder(fd, child.name, info):
                entries[rel.lstrip("/")] = _describe(fd, child.name, info)
        try:
            if not child.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        if in_node_modules and child.name != ".bin":
            continue
        if rel.endswith("/.git/objects"):
            queue.append((*parts, child.name, "info"))
            continue
        queue.append((*parts, child.name))
    return visited, False


class _Matcher:
    """`patterns` as one test: `/**/NAME` patterns (the common case) by a set lookup on
    the path's components, the rest by one anchored regex (gitignore semantics: a
    pattern also covers everything under what it names)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.names: set[str] = set()
        rest = []
        for pattern in patterns:
            name = pattern.removeprefix("/**/")
            if name != pattern and not any(c in name for c in "*?[/"):
                self.names.add(name)
            else:
                rest.append(pattern)
        self.regex = re.compile(
            "(?:" + "|".join(pattern_regex(p) for p in rest) + ")(?:/.*)?", re.DOTALL
        )

    def matches(self, rel: str, name: str) -> bool:
        if name in self.names or (self.names and not self.names.isdisjoint(rel.split("/"))):
            return True
        return self.regex.fullmatch(rel) is not None


PLACEHOLDER_NAMES = frozenset({".git", ".claude"})
"""Directories warden itself creates empty (read-only mount points, `workspace.guard`)
and removes again; another run on the workspace may do so at any time."""


def _placeholder(dir_fd: int, name: str, info: os.stat_result) -> bool:
    """An empty `.git` or `.claude` directory: a placeholder, which runs nothing, so its
    coming and going (a concurrent run's) is no change of this run's."""
    if name not in PLACEHOLDER_NAMES or not stat.S_ISDIR(info.st_mode):
        return False
    fd = beneath.directory_at(dir_fd, name)
    if fd is None:
        return False
    try:
        with os.scandir(fd) as it:
            return next(it, None) is None
    except OSError:
        return False
    finally:
        os.close(fd)


def _describe(dir_fd: int, name: str, info: os.stat_result) -> _Entry:
    mode = info.st_mode
    digest = None
    if stat.S_ISLNK(mode):
        kind = "link"
        try:
            digest = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            digest = None
    elif stat.S_ISDIR(mode):
        kind = "dir"
    elif stat.S_ISREG(mode):
        kind = "file"
        if info.st_size <= HASH_MAX_BYTES:
            data = beneath.read_regular(dir_fd, name, HASH_MAX_BYTES)
            digest = None if data is None else hashlib.sha256(data).hexdigest()
    else:
        kind = "other"
    return _Entry(kind, mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, digest)


def compare(
    before: Snapshot, after: Snapshot, patterns: Sequence[str] = EXECUTED_PATHS
) -> SensitiveReport:
    """What changed between two snapshots: every change, by row of `patterns`, then path."""
    changes: list[SensitiveChange] = []
    for path in sorted(before.entries.keys() | after.entries.keys()):
        old, new = before.entries.get(path), after.entries.get(path)
        if old == new:
            continue
        if (
            new is not None
            and old is not None
            and new.kind == old.kind == "dir"
            and (old.mode, old.inode) == (new.mode, new.inode)
        ):
            continue  # a directory's own times change with its entries, listed apart
        row = _row(patterns, path)
        if old is None:
            assert new is not None
            changes.append(
                SensitiveChange(path=path, change="created", kind=new.kind, size=new.size, row=row)
            )
        elif new is None:
            changes.append(
                SensitiveChange(path=path, change="deleted", kind=old.kind, size=old.size, row=row)
            )
        else:
            changes.append(
                SensitiveChange(path=path, change="modified", kind=new.kind, size=new.size, row=row)
            )
    changes.sort(key=lambda c: (c.row, c.path))
    return SensitiveReport(changes=changes, scan_truncated=before.truncated or after.truncated)


def _row(patterns: Sequence[str], path: str) -> int:
    return next((i for i, p in enumerate(patterns) if matches(p, "/" + path)), len(patterns))


class ExecutedPathsWatch:
    """Snapshot at the start of a run, report at its end (both blocking: use a thread)."""

    def __init__(
        self,
        workspace: Path,
        extra: Sequence[str] = (),
        trust_before: Mapping[str, TrustedFile] | None = None,
        *,
        hooks: Sequence[str] | None = None,
        held_dir: Path | None = None,
        hook_scripts: Sequence[str] = (),
        host_scripts: Sequence[str] = (),
    ) -> None:
        """`hooks`: `core.hooksPath` as the run read it (`workspace.inputs`; None:
        read now). `held_dir`: where changes under the asking rows are held at the
        end (`workspace.held_changes`; None: they are only reported). `hook_scripts`:
        the workspace files the hooks name (`PolicyInputs.hook_scripts`): a change to
        one is held too, so nothing written there during a run (one absent at its
        start, which no wall covers, included) is what the next run's hook runs.
        `host_scripts`: those trust covers because a host hook of any settings
        layer names them (`PolicyInputs.host_scripts`), for the trust review."""
        self.workspace = workspace
        if hooks is None:
            found = hooks_path_pattern(workspace)
            hooks = (found,) if found else ()
        self.patterns = (
            *EXECUTED_PATHS,
            *hooks,
            *("/" + p.strip("/") for p in (*extra, *hook_scripts)),
        )
        self.before = take_snapshot(workspace, self.patterns)
        self.held_dir = held_dir
        rows = held_rows()
        self.hook_scripts = frozenset(p.strip("/") for p in hook_scripts)
        self.held_patterns = (
            *(EXECUTED_PATHS[i] for i in sorted(rows)),
            *("/" + p for p in sorted(self.hook_scripts)),
        )
        self.kept = (
            keep_originals(workspace, self.before.entries, self.held_patterns)
            if held_dir is not None
            else {}
        )
        # The run's own trust snapshot when given (`workspace.inputs`): one read.
        self.trust_before = (
            dict(trust_before)
            if trust_before is not None
            else trust_fingerprint(workspace, host_scripts=host_scripts)
        )
        self.host_scripts = tuple(host_scripts)

    def report(self) -> SensitiveReport:
        after = take_snapshot(self.workspace, self.patterns)
        found = compare(self.before, after, self.patterns)
        # A file whose content is exactly what warden itself wrote for a person's
        # "always allow" is warden's change, not a sandbox's: not listed as one.
        changes = [
            c for c in found.changes
            if not self._warden_wrote(c.path, (after.entries.get(c.path) or _NONE).digest)
        ]  # fmt: skip
        held: list[HeldChange] = []
        not_held: list[NotHeld] = []
        if self.held_dir is not None:
            rows = held_rows()
            todo = [
                (c.path, c.change) for c in changes
                if (c.row in rows or c.path in self.hook_scripts) and c.kind != "dir"
            ]  # fmt: skip
            if todo:
                held, not_held = hold(self.workspace, todo, self.kept, self.held_dir)
            if held:  # what `warden held` reviews and applies
                save_manifest(
                    self.held_dir,
                    HeldManifest(
                        run_id=self.held_dir.parent.name,
                        workspace=str(self.workspace),
                        changes=held,
                    ),
                )
        # After the hold: what trust covers as the run leaves the workspace.
        prints = trust_fingerprint(self.workspace, host_scripts=self.host_scripts)
        review = trust_changes(self.trust_before, prints)
        trust_review = [
            c.path for c in review
            if not self._warden_wrote(c.path, prints[c.path].digest.removeprefix("sha256:")
                                      if c.path in prints else None)
        ]  # fmt: skip
        return found.model_copy(
            update={
                "changes": changes,
                "trust_review": trust_review,
                "held": held,
                "not_held": not_held,
                "held_dir": str(self.held_dir) if held else "",
            }
        )

    def _warden_wrote(self, rel: str, digest: str | None) -> bool:
        return digest is not None and digest == own_write_digest(self.workspace / rel)


REVIEW_REASON = (
    "a sandbox wrote a path that git, CI, editors or build tools execute; review it "
    "before running them in this workspace"
)


def audit_records(run_id: str, report: SensitiveReport) -> list[AuditRecord]:
    """One audit record per changed file, every one (decision "ask": a person should look)."""
    records = []
    for change in report.changes:
        records.append(
            audit_record(
                run_id=run_id,
                agent_type="warden",
                tool_name=AUDIT_TOOL_NAME,
                tool_input=change.model_dump(),
                decision="ask",
                final="allow",
                decided_by="end-of-run scan of executed paths",
                source="workspace report",
                reason=REVIEW_REASON,
            )
        )
    return records


async def end_of_run_report(
    watch: ExecutedPathsWatch | None, store: Store, run_id: str
) -> SensitiveReport | None:
    """Compare with the run's snapshot and record every change in the audit."""
    if watch is None:
        return None
    report = await asyncio.to_thread(watch.report)
    for record in audit_records(run_id, report):
        await asyncio.to_thread(store.record_audit, record)
    return report
