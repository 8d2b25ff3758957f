"""Applying a reviewed change set to the shared workspace: a three-way merge of
each path against what the workspace holds *now*, written atomically per file.

The content written is the reviewed content, read from the content store by the
hashes in the change set (never from the working copy). The workspace is opened
from its own descriptor down, one component at a time with `O_NOFOLLOW`, so a
link anywhere on the way (a sandbox of the run may have put one there) is
refused, never followed; each file is written to a temporary name in its
directory and renamed over the old name (a rename replaces a link, it does not
write through it).

Each path is planned first: the workspace still holds the base (write the new
side), already holds the new side (nothing to do), or holds something else (for
text files on all three sides: `git merge-file` merges them; a clean merge is
written, a conflict is shown). A file the subagent replaced by a directory (or a
directory by a file or link) is a change like the others when the workspace still
holds the copy's start there: removals are planned and written first (deepest
first), and a directory is replaced only when every file in it is one the change
set removes as the copy started from it and every directory in it one the copy
started with (an empty directory the copy started with is replaced only while
the workspace's is still empty). If any path conflicts, nothing is written and the
change set stays pending with the conflicts named. `git merge-file` runs on three
files in a private temporary directory, outside any repository, with no system or
global config: no workspace config, attributes, filter or merge driver is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from orchestrator.apply.changeset import ChangeSet, ContentStore, FileChange, PathReason
from orchestrator.apply.policy import protected_by
from orchestrator.apply.tree import MAX_DEPTH

MERGE_TIMEOUT_S = 30.0
"""Longest one `git merge-file` may take."""
MAX_MERGE_BYTES = 8 << 20
"""Largest file a three-way merge is tried on (larger ones conflict)."""
TEMP_PREFIX = ".warden-apply-"


@dataclass(frozen=True)
class Current:
    """What the workspace holds at a path now."""

    type: Literal["none", "file", "symlink", "dir", "other"]
    sha256: str | None = None
    mode: int | None = None
    link_target: str | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class Step:
    """One planned write: `data` with `mode`, a link to `link_target`, or a removal."""

    change: FileChange
    expect: Current
    action: Literal["write", "link", "remove", "keep"]
    data: bytes = b""
    mode: int = 0o644
    link_target: str = ""
    merged: bool = False
    clear_dir: bool = False
    """The workspace holds a directory there that the change set empties (a
    directory the subagent replaced by a file or link): its emptied directories are
    removed first."""


@dataclass(frozen=True)
class ApplyResult:
    applied: tuple[str, ...]
    conflicts: tuple[PathReason, ...]
    merged: tuple[str, ...] = ()
    """Paths written as a three-way merge of the workspace's and the subagent's edits."""


def apply_change_set(change_set: ChangeSet, workspace_fd: int, store: ContentStore) -> ApplyResult:
    """Merge `change_set` into the workspace whose directory is `workspace_fd`.
    Raises ContentMissingError when the reviewed content is gone from the store."""
    steps: list[Step] = []
    conflicts: list[PathReason] = []
    # Removals first: a path the change set removes from where the workspace still
    # holds what the copy started from is out of the way of the paths planned after
    # it (a file the subagent replaced by a directory, or the reverse).
    removals = [c for c in change_set.changes if c.new_type is None]
    others = [c for c in change_set.changes if c.new_type is not None]
    vacated: set[str] = set()
    for change in [*removals, *others]:
        step = _plan(change, workspace_fd, store, vacated)
        if isinstance(step, PathReason):
            conflicts.append(step)
            continue
        steps.append(step)
        if step.action in ("remove", "keep") and change.new_type is None:
            vacated.add(change.path)
    if conflicts:
        return ApplyResult(applied=(), conflicts=tuple(conflicts))
    applied: list[str] = []
    # Removals deepest first, then the writes in path order (a directory's emptied
    # remains go before the file that takes its place).
    ordered = sorted((s for s in steps if s.action == "remove"), key=lambda s: s.change.path)
    ordered.reverse()
    ordered += [s for s in steps if s.action != "remove"]
    for step in ordered:
        if step.action == "keep":
            continue
        problem = _write(step, workspace_fd)
        if problem is not None:
            return ApplyResult(applied=tuple(applied), conflicts=(problem,))
        applied.append(step.change.path)
    merged = tuple(s.change.path for s in steps if s.merged)
    return ApplyResult(applied=tuple(sorted(applied)), conflicts=(), merged=merged)


def _conflict(change: FileChange, why: str, rule: str = "conflict") -> PathReason:
    return PathReason(path=change.path, reason=why, rule=rule)


def _plan(
    change: FileChange, root: int, store: ContentStore, vacated: set[str]
) -> Step | PathReason:
    """One path's step. `vacated`: the paths already planned as removed where the
    workspace holds what the copy started from (out of the way once removed)."""
    if protected_by(change.path):
        return _conflict(change, "a protected path: never written by an apply", "protected")
    parts = change.path.split("/")
    clear_dir = False
    with _parent(root, parts[:-1], create=False) as parent:
        if parent is False and not _vacated_on_the_way(parts, vacated):
            return _conflict(change, "a link or a non-directory is in the way in the workspace")
        now = Current("none") if parent in (None, False) else _current(parent, parts[-1])
        started_dir = change.old_type == "dir"
        if (
            now.type == "dir"
            and (change.new_type is not None or started_dir)
            and isinstance(parent, int)
        ):
            left = _left_in_dir(parent, parts[-1], change.path, vacated, started_dir)
            if left:
                put = f"put a {change.new_type}" if change.new_type else "removed a directory"
                return _conflict(
                    change,
                    f"the subagent {put} where the workspace holds a directory that has "
                    f"changed since the copy was made ({left} is not the copy's); nothing "
                    "was applied",
                )
            if change.new_type is not None:
                clear_dir = True
                if not started_dir:
                    now = Current("none")
    old = _side(change, "old")
    new = _side(change, "new")
    if _same(now, new):
        return Step(change, now, "keep")
    if now.type == "other" or (now.type == "dir" and not started_dir):
        return _conflict(change, "the workspace holds a directory or special file there now")
    if change.new_type is None:
        action: Literal["write", "link", "remove"] = "remove"
    elif change.new_type == "symlink":
        action = "link"
    else:
        action = "write"
    if _same(now, old):
        data = store.read(change.new_sha256) if action == "write" and change.new_sha256 else b""
        return Step(
            change,
            now,
            action,
            data=data,
            mode=change.new_mode or 0o644,
            link_target=change.link_target or "",
            clear_dir=clear_dir,
        )
    # The workspace changed that path since the copy was made: merge or show it.
    if (
        action == "write"
        and now.type == "file"
        and change.old_type == "file"
        and change.old_sha256
        and change.new_sha256
        and not change.binary
        and now.data is not None
    ):
        merged = _merge_file(now.data, store.read(change.old_sha256), store.read(change.new_sha256))
        if merged is not None:
            return Step(change, now, "write", data=merged, mode=now.mode or 0o644, merged=True)
        return _conflict(
            change,
            "both the workspace and the subagent changed the same lines since the copy was "
            "made; nothing was applied (resolve by hand, then warden apply TASK again, or "
            "warden discard TASK)",
        )
    return _conflict(
        change,
        "the workspace changed it since the copy was made and the two cannot be merged "
        "line by line; nothing was applied",
    )


def _vacated_on_the_way(parts: list[str], vacated: set[str]) -> bool:
    """Whether a directory on the way to a path is a file or link the change set
    removes (the subagent replaced it by a directory): nothing of the workspace's
    is in the way once it is removed."""
    return any("/".join(parts[:i]) in vacated for i in range(1, len(parts)))


MAX_CLEARED_ENTRIES = 100_000
"""Most entries a directory replaced by a file may hold in the workspace."""


def _left_in_dir(parent: int, name: str, path: str, vacated: set[str], started_dir: bool) -> str:
    """The first entry under the workspace's directory `path` that the copy did not
    start with: a file or link the change set does not remove as the copy started
    from it, or a directory that is neither an empty one the change set removes nor
    above a removed file (empty: replacing or removing the directory loses nothing
    of the workspace's own). `started_dir`: the copy started with `path` as an empty
    directory."""
    if not started_dir and not any(v.startswith(f"{path}/") for v in vacated):
        return f"{path}/ (the copy did not start with files there)"
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    todo: list[tuple[int, str, int]] = []
    seen = 0
    try:
        todo.append((os.open(name, flags, dir_fd=parent), path, 1))
        while todo:
            fd, where, depth = todo.pop()
            try:
                for entry in os.listdir(fd):
                    seen += 1
                    inner = f"{where}/{entry}"
                    if seen > MAX_CLEARED_ENTRIES or depth > MAX_DEPTH:
                        return f"{inner} (too many entries or too deep)"
                    info = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        if inner not in vacated and not any(
                            v.startswith(f"{inner}/") for v in vacated
                        ):
                            return f"{inner}/ (a directory the copy did not start with)"
                        todo.append((os.open(entry, flags, dir_fd=fd), inner, depth + 1))
                    elif inner not in vacated:
                        return inner
            finally:
                os.close(fd)
    except OSError as exc:
        return f"{path} ({exc.strerror or exc})"
    finally:
        for fd, _, _ in todo:
            os.close(fd)
    return ""


def _clear_dir(parent: int, name: str) -> None:
    """Remove the (emptied) directory `name` and the empty directories in it; an
    entry that is not a directory stops it (OSError)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, dir_fd=parent)
    try:
        for entry in os.listdir(fd):
            _clear_dir(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _side(change: FileChange, side: Literal["old", "new"]) -> Current:
    kind = change.old_type if side == "old" else change.new_type
    if kind is None:
        return Current("none")
    if kind == "dir":
        return Current("dir")
    if kind == "symlink":
        target = change.old_link_target if side == "old" else change.link_target
        return Current("symlink", link_target=target)
    if side == "old":
        return Current("file", sha256=change.old_sha256, mode=change.old_mode)
    return Current("file", sha256=change.new_sha256, mode=change.new_mode)


def _same(a: Current, b: Current) -> bool:
    if a.type != b.type:
        return False
    if a.type == "file":
        return a.sha256 == b.sha256 and a.mode == b.mode
    if a.type == "symlink":
        return a.link_target == b.link_target
    return a.type in ("none", "dir")  # a directory's content is checked by the plan


def _current(parent: int, name: str) -> Current:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return Current("none")
    if stat.S_ISLNK(info.st_mode):
        return Current("symlink", link_target=os.fsdecode(os.readlink(name, dir_fd=parent)))
    if stat.S_ISDIR(info.st_mode):
        return Current("dir")
    if not stat.S_ISREG(info.st_mode):
        return Current("other")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except OSError:
        return Current("other")
    digest = hashlib.sha256()
    kept: list[bytes] = []
    size = 0
    with os.fdopen(fd, "rb") as f:
        opened = os.fstat(f.fileno())
        if not stat.S_ISREG(opened.st_mode):
            return Current("other")
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
            if size <= MAX_MERGE_BYTES:
                kept.append(chunk)
    return Current(
        "file",
        sha256=digest.hexdigest(),
        mode=stat.S_IMODE(opened.st_mode),
        data=b"".join(kept) if size <= MAX_MERGE_BYTES else None,
    )


@contextlib.contextmanager
def _parent(root: int, dirs: list[str], *, create: bool) -> Iterator[int | Literal[False] | None]:
    """The directory `dirs` under `root`, opened without following links: its fd,
    None when missing (and not `create`), False when a link or file is in the way."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.dup(root)
    try:
        for name in dirs:
            try:
                nxt = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                os.mkdir(name, 0o755, dir_fd=fd)
                nxt = os.open(name, flags, dir_fd=fd)
            except OSError:  # ELOOP (a link), ENOTDIR
                yield False
                return
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _write(step: Step, root: int) -> PathReason | None:
    parts = step.change.path.split("/")
    name = parts[-1]
    try:
        with _parent(root, parts[:-1], create=step.action != "remove") as parent:
            if parent is None:
                return None if step.action == "remove" else _conflict(step.change, "gone")
            if parent is False:
                return _conflict(
                    step.change, "a link or a non-directory is in the way in the workspace"
                )
            expect = step.expect
            if step.clear_dir:
                if _current(parent, name).type == "dir":
                    _clear_dir(parent, name)  # its files were removed by the steps before
                expect = Current("none")
            now = _current(parent, name)
            if not _same(now, expect):
                return _conflict(
                    step.change,
                    "the workspace changed it while the change set was being applied; the "
                    "paths before it were applied, this one and those after it were not",
                )
            if step.action == "remove":
                if now.type == "dir":  # an empty directory: rmdir refuses anything in it
                    os.rmdir(name, dir_fd=parent)
                elif now.type != "none":
                    os.unlink(name, dir_fd=parent)
                return None
            tmp = f"{TEMP_PREFIX}{secrets.token_hex(6)}"
            owner = _owner(parent, name)
            if step.action == "link":
                os.symlink(step.link_target, tmp, dir_fd=parent)
            else:
                _write_file(parent, tmp, step.data, step.mode)
            with contextlib.suppress(OSError):  # only root may give a file away
                os.chown(tmp, *owner, dir_fd=parent, follow_symlinks=False)
            try:
                os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise
    except OSError as exc:
        return _conflict(step.change, f"could not be written: {exc.strerror or exc}")
    return None


def _owner(parent: int, name: str) -> tuple[int, int]:
    """Who a written file belongs to: the file it replaces, else its directory's owner
    (a root-run warden keeps the person's files the person's)."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        info = os.fstat(parent)
    return info.st_uid, info.st_gid


def _write_file(parent: int, name: str, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
            out.flush()
            os.fchmod(fd, mode & 0o7777)
            os.fsync(fd)
    finally:
        os.close(fd)


def _merge_file(current: bytes, base: bytes, new: bytes) -> bytes | None:
    """The clean three-way merge (workspace, base, subagent), or None on a conflict
    (or when git is missing or the files are too large: never resolved silently)."""
    git = shutil.which("git")
    if git is None or max(len(current), len(base), len(new)) > MAX_MERGE_BYTES:
        return None
    with tempfile.TemporaryDirectory(prefix="warden-merge-") as tmp:
        names = []
        for label, data in (("current", current), ("base", base), ("new", new)):
            path = os.path.join(tmp, label)
            with open(path, "wb") as f:
                f.write(data)
            names.append(path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CEILING_DIRECTORIES": tmp,
            "LC_ALL": "C",
        }
        try:
            done = subprocess.run(
                [
                    git,
                    "merge-file",
                    "-p",
                    "-L",
                    "workspace",
                    "-L",
                    "base",
                    "-L",
                    "subagent",
                    *names,
                ],
                cwd=tmp,
                env=env,
                capture_output=True,
                timeout=MERGE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    return done.stdout if done.returncode == 0 else None
