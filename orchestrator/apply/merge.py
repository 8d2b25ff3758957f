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
written, a conflict is shown). If any path conflicts, nothing is written and the
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

MERGE_TIMEOUT_S = 30.0
"""Longest one `git merge-file` may take."""
MAX_MERGE_BYTES = 8 << 20
"""Largest file a three-way merge is tried on (larger ones conflict)."""
TEMP_PREFIX = ".warden-apply-"


@dataclass(frozen=True)
class Current:
    """What the workspace holds at a path now."""

    type: Literal["none", "file", "symlink", "other"]
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
    for change in change_set.changes:
        step = _plan(change, workspace_fd, store)
        if isinstance(step, PathReason):
            conflicts.append(step)
        else:
            steps.append(step)
    if conflicts:
        return ApplyResult(applied=(), conflicts=tuple(conflicts))
    applied: list[str] = []
    for step in steps:
        if step.action == "keep":
            continue
        problem = _write(step, workspace_fd)
        if problem is not None:
            return ApplyResult(applied=tuple(applied), conflicts=(problem,))
        applied.append(step.change.path)
    merged = tuple(s.change.path for s in steps if s.merged)
    return ApplyResult(applied=tuple(applied), conflicts=(), merged=merged)


def _conflict(change: FileChange, why: str, rule: str = "conflict") -> PathReason:
    return PathReason(path=change.path, reason=why, rule=rule)


def _plan(change: FileChange, root: int, store: ContentStore) -> Step | PathReason:
    if protected_by(change.path):
        return _conflict(change, "a protected path: never written by an apply", "protected")
    parts = change.path.split("/")
    with _parent(root, parts[:-1], create=False) as parent:
        if parent is False:
            return _conflict(change, "a link or a non-directory is in the way in the workspace")
        now = Current("none") if parent is None else _current(parent, parts[-1])
    old = _side(change, "old")
    new = _side(change, "new")
    if _same(now, new):
        return Step(change, now, "keep")
    if now.type == "other":
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


def _side(change: FileChange, side: Literal["old", "new"]) -> Current:
    kind = change.old_type if side == "old" else change.new_type
    if kind is None:
        return Current("none")
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
    return a.type == "none"


def _current(parent: int, name: str) -> Current:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return Current("none")
    if stat.S_ISLNK(info.st_mode):
        return Current("symlink", link_target=os.fsdecode(os.readlink(name, dir_fd=parent)))
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
            now = _current(parent, name)
            if not _same(now, step.expect):
                return _conflict(
                    step.change,
                    "the workspace changed it while the change set was being applied; the "
                    "paths before it were applied, this one and those after it were not",
                )
            if step.action == "remove":
                if now.type != "none":
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
