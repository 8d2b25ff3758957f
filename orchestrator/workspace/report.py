"""The end-of-run report: files a run created, changed or removed under paths that
the host or a developer's tools execute.

Read-only mounts cover `.claude/`, `.git` and `--protect` paths; everything else
in the workspace is the subagents' to write, including files that run code the
next time someone types `make`, `npm test`, `git status` in a subdirectory, or
opens the folder in an editor. Those are listed at the end of every run (in the
terminal summary, the `--json` result and the audit), so a person reviews them
before trusting them.

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
import json
import os
import re
import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.permissions.paths import pattern_regex
from orchestrator.store.records import AuditRecord

if TYPE_CHECKING:
    from orchestrator.store import Store

EXECUTED_PATHS: tuple[str, ...] = (
    # git runs hooks, fsmonitor, filters and pagers from its metadata, at any depth
    "/**/.git",
    "/**/.gitmodules",
    "/**/.gitattributes",
    # warden's and Claude Code's settings, hooks and agents
    "/.claude",
    "/**/.claude",
    # CI, run with the repository's secrets
    "/.github/workflows",
    "/.github/actions",
    "/.gitlab-ci.yml",
    "/.circleci",
    "/.buildkite",
    "/Jenkinsfile",
    "/azure-pipelines.yml",
    "/.travis.yml",
    # editors and shells run these when the folder is opened or entered
    "/**/.envrc",
    "/.vscode",
    "/.idea",
    "/.devcontainer",
    "/.bashrc",
    "/.bash_profile",
    "/.bash_login",
    "/.profile",
    "/.zshrc",
    "/.zshenv",
    "/.zprofile",
    # build and test entry points
    "/**/node_modules/.bin",
    "/**/package.json",
    "/.npmrc",
    "/.yarnrc",
    "/.yarnrc.yml",
    "/.pnpmfile.cjs",
    "/**/Makefile",
    "/**/makefile",
    "/**/GNUmakefile",
    "/**/*.mk",
    "/justfile",
    "/Justfile",
    "/Taskfile.yml",
    "/Rakefile",
    "/Gemfile",
    "/pyproject.toml",
    "/setup.py",
    "/setup.cfg",
    "/tox.ini",
    "/noxfile.py",
    "/pytest.ini",
    "/**/conftest.py",
    "/**/sitecustomize.py",
    "/**/usercustomize.py",
    "/**/*.pth",
    "/.pre-commit-config.yaml",
    "/Cargo.toml",
    "/build.rs",
    "/.cargo",
    "/build.gradle",
    "/build.gradle.kts",
    "/settings.gradle",
    "/gradlew",
    "/mvnw",
    "/**/Dockerfile",
    "/docker-compose.yml",
    "/docker-compose.yaml",
    "/compose.yml",
    "/compose.yaml",
    "/bin",
    "/*.sh",
)
"""Workspace paths (gitignore-style, from the workspace root; a pattern covers
everything under what it names) that the host or a developer's tools execute."""

MAX_SCAN_ENTRIES = 200_000
"""Directory entries one snapshot visits at most; past it the scan stops and says so."""
HASH_MAX_BYTES = 64 * 1024
"""Files up to this size are hashed in the snapshot (larger ones compare by metadata)."""
AUDIT_TOOL_NAME = "WorkspaceChange"
"""The tool name of audit records the end-of-run report writes."""
MAX_REPORTED = 500
"""Most changes listed; the rest are counted and announced."""

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


class SensitiveReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    changes: list[SensitiveChange]
    omitted: int = 0
    """Changes found beyond MAX_REPORTED."""
    scan_truncated: bool = False
    """A snapshot stopped at MAX_SCAN_ENTRIES: changes deeper in the tree are not listed."""
    scan_limit: int = MAX_SCAN_ENTRIES

    def render(self) -> list[str]:
        """Plain-text lines for the terminal summary (empty when there is nothing to say)."""
        lines = []
        if self.changes:
            lines.append(
                f"review before trusting: {len(self.changes) + self.omitted} file(s) under "
                "paths that git, CI, editors or build tools execute were changed by this run:"
            )
            lines += [f"  {c.change:<8} {c.kind:<5} {_printable(c.path)}" for c in self.changes]
            if self.omitted:
                lines.append(f"  … and {self.omitted} more (see `warden audit`)")
        if self.scan_truncated:
            lines.append(
                f"the executed-paths scan stopped at {self.scan_limit} entries; "
                "changes deeper in the workspace are not listed"
            )
        return lines


def _printable(text: str) -> str:
    # The one helper for container text on a terminal (paths are written by sandboxes).
    from orchestrator.ui.untrusted_text import printable

    return printable(text, None)


def take_snapshot(
    workspace: Path, patterns: Sequence[str], *, limit: int = MAX_SCAN_ENTRIES
) -> Snapshot:
    """Walk the workspace (breadth-first, no links followed) and record what matches."""
    matcher = _Matcher(patterns)
    entries: dict[str, _Entry] = {}
    queue: deque[tuple[str, str]] = deque([(str(workspace), "")])
    visited = 0
    while queue:
        directory, rel_dir = queue.popleft()
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        in_node_modules = os.path.basename(rel_dir) == "node_modules"
        for child in children:
            if visited >= limit:
                return Snapshot(entries, visited, truncated=True)
            visited += 1
            rel = f"{rel_dir}/{child.name}"
            if matcher.matches(rel, child.name):
                try:
                    info = child.stat(follow_symlinks=False)
                except OSError:
                    continue
                entries[rel.lstrip("/")] = _describe(child.path, info)
            try:
                if not child.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            if in_node_modules and child.name != ".bin":
                continue
            if rel.endswith("/.git/objects"):
                queue.append((os.path.join(child.path, "info"), rel + "/info"))
                continue
            queue.append((child.path, rel))
    return Snapshot(entries, visited, truncated=False)


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


def _describe(path: str, info: os.stat_result) -> _Entry:
    mode = info.st_mode
    digest = None
    if stat.S_ISLNK(mode):
        kind = "link"
        try:
            digest = os.readlink(path)
        except OSError:
            digest = None
    elif stat.S_ISDIR(mode):
        kind = "dir"
    elif stat.S_ISREG(mode):
        kind = "file"
        if info.st_size <= HASH_MAX_BYTES:
            digest = _hash(path)
    else:
        kind = "other"
    return _Entry(kind, mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, digest)


def _hash(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return hashlib.sha256(handle.read(HASH_MAX_BYTES + 1)).hexdigest()


def compare(before: Snapshot, after: Snapshot) -> SensitiveReport:
    """What changed between two snapshots, paths sorted."""
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
        if old is None:
            assert new is not None
            changes.append(
                SensitiveChange(path=path, change="created", kind=new.kind, size=new.size)
            )
        elif new is None:
            changes.append(
                SensitiveChange(path=path, change="deleted", kind=old.kind, size=old.size)
            )
        else:
            changes.append(
                SensitiveChange(path=path, change="modified", kind=new.kind, size=new.size)
            )
    return SensitiveReport(
        changes=changes[:MAX_REPORTED],
        omitted=max(0, len(changes) - MAX_REPORTED),
        scan_truncated=before.truncated or after.truncated,
    )


class ExecutedPathsWatch:
    """Snapshot at the start of a run, report at its end (both blocking: use a thread)."""

    def __init__(self, workspace: Path, extra: Sequence[str] = ()) -> None:
        self.workspace = workspace
        self.patterns = (*EXECUTED_PATHS, *("/" + p.strip("/") for p in extra))
        self.before = take_snapshot(workspace, self.patterns)

    def report(self) -> SensitiveReport:
        return compare(self.before, take_snapshot(self.workspace, self.patterns))


REVIEW_REASON = (
    "a sandbox wrote a path that git, CI, editors or build tools execute; review it "
    "before running them in this workspace"
)


def audit_records(run_id: str, report: SensitiveReport) -> list[AuditRecord]:
    """One audit record per reported file (decision "ask": a person should look)."""
    records = []
    for change in report.changes:
        data = change.model_dump()
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        records.append(
            AuditRecord(
                run_id=run_id,
                agent_type="warden",
                tool_name=AUDIT_TOOL_NAME,
                input_hash=digest,
                tool_input=data,
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
