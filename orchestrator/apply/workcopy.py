"""A subagent's own working copy (`isolation: worktree`): made on the host from
what the workspace holds when the task starts (its committed and uncommitted
files alike, `.git` left out), kept in a host-private place no other sandbox
mounts, and mounted as that subagent's `/workspace`.

Each copy lives in `<state dir>/apply/<task id>/`: `work/` (what the sandbox
mounts), `copy.json` (whose it is: run, task, session label, workspace, the
base tree) and, once the subagent has ended, `changes.json` (the change set) and
`decision.json`. The label and ids let `warden cleanup` remove what a crashed
run left. Why a copy and not `git worktree add`: that runs the workspace's git
(its config, hooks, filters: attacker-writable text) on the host and writes into
its `.git`; a copy runs nothing. The sandbox gets the workspace's `.git`
read-only beside it (`git status`/`diff` work against the same HEAD and index).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.apply.changeset import ApplyError, ContentStore
from orchestrator.apply.tree import SKIPPED_AT_ROOT, Entry, Tree, read_tree, tree_hash
from orchestrator.owner import current as current_owner

COPY_META = "copy.json"
WORK_DIR = "work"
CONTENT_DIR = "content"
STORE_LIMIT_BYTES = 64 << 20
"""Largest file whose content is kept in the content store (the base of a merge and
what a review shows); larger files are hashed only."""
COPY_CHUNK = 1 << 20


class WorkingCopyError(ApplyError, OSError):
    """A working copy could not be made or read."""


class CopyRecord(BaseModel):
    """`copy.json`: whose a working copy is and what it started from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    task_id: str
    agent: str
    session: str
    """The warden session label (the one its containers carry)."""
    workspace: str
    """The shared workspace it was copied from (and is applied to)."""
    base: str
    """`snapshot:` and the hash of the copied tree."""
    created: float
    owner: str = ""
    """The warden process that made it (`owner.Owner` as JSON): `warden cleanup`
    settles the copies of owners that are provably dead."""
    base_entries: dict[str, dict[str, object]]
    """The copied tree: path → `tree.Entry` fields."""
    base_empty_dirs: tuple[str, ...] = ()
    """The copied tree's empty directories (a copy recorded before they were kept
    has none: a file put in place of one of them is then a conflict)."""

    def base_tree(self) -> dict[str, Entry]:
        return {p: Entry(**e) for p, e in self.base_entries.items()}  # type: ignore[arg-type]


def apply_root(state_dir: Path) -> Path:
    """Where every working copy and the content store live (host-private, 0700)."""
    root = state_dir / "apply"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    return root


def content_store(state_dir: Path) -> ContentStore:
    return ContentStore(apply_root(state_dir) / CONTENT_DIR)


STORE_LOCK = "store.lock"
"""`flock`ed shared by whoever puts content into the store until the record that
names it is on disk, and exclusively by `prune.prune_store`."""


@contextlib.contextmanager
def store_lock(state_dir: Path, *, exclusive: bool = False, wait: bool = True) -> Iterator[bool]:
    """The content store's lock: shared (writers) or exclusive (pruning). With
    `wait` false, yields False at once when it is held the other way."""
    fd = os.open(apply_root(state_dir) / STORE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def store_writing(state_dir: Path) -> Iterator[None]:
    """Hold while putting content into the store and until the record naming it
    (`copy.json`, `changes.json`, a held record) is written: the store is never
    pruned in between, so content a record is about to name is never removed."""
    with store_lock(state_dir):
        yield


class WorkingCopy:
    """One task's copy: its directory, record and paths."""

    def __init__(self, home: Path, record: CopyRecord) -> None:
        self.home = home
        self.record = record

    @property
    def work(self) -> Path:
        return self.home / WORK_DIR

    @classmethod
    def load(cls, home: Path) -> WorkingCopy:
        try:
            record = CopyRecord.model_validate_json((home / COPY_META).read_bytes())
        except (OSError, ValueError) as exc:
            raise WorkingCopyError(
                f"{home} is not a readable working copy ({exc}); remove it with warden discard"
            ) from exc
        return cls(home, record)

    def remove(self) -> None:
        """Remove the copy and its records (never its content in the store)."""
        _make_writable(self.home)
        shutil.rmtree(self.home, ignore_errors=True)


def make_working_copy(
    workspace: Path,
    state_dir: Path,
    *,
    run_id: str,
    task_id: str,
    agent: str,
    session: str,
    owner: tuple[int, int] | None = None,
) -> WorkingCopy:
    """Copy `workspace` (without `.git`) to a new working copy for `task_id`; its
    base tree (and the content of every file in it) goes into the content store.
    `owner`: uid:gid the copy's files get (the sandbox's), when we may chown."""
    home = apply_root(state_dir) / task_id
    try:
        home.mkdir(mode=0o700)
        work = home / WORK_DIR
        work.mkdir(mode=0o755)
        src = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            dst = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                _copy_dir(src, dst, "", owner)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        if owner is not None:
            with contextlib.suppress(PermissionError):
                os.chown(work, *owner)
        with store_writing(state_dir):  # the base content, until copy.json names it
            dst = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                tree = read_tree(dst, content_store(state_dir), store_limit=STORE_LIMIT_BYTES)
            finally:
                os.close(dst)
            record = CopyRecord(
                run_id=run_id,
                task_id=task_id,
                agent=agent,
                session=session,
                workspace=str(workspace),
                base=f"snapshot:{tree_hash(tree)}",
                created=time.time(),
                owner=current_owner(state_dir).to_json(),
                base_entries={p: asdict(e) for p, e in tree.entries.items()},
                base_empty_dirs=tuple(sorted(tree.empty_dirs)),
            )
            tmp = home / f".{COPY_META}.tmp"
            tmp.write_text(record.model_dump_json(), encoding="utf-8")
            os.replace(tmp, home / COPY_META)
    except OSError as exc:
        shutil.rmtree(home, ignore_errors=True)
        raise WorkingCopyError(
            f"could not make a working copy of {workspace} for {task_id}: {exc}; check the "
            "free space of warden's state directory, or run without isolation: worktree"
        ) from exc
    return WorkingCopy(home, record)


def read_copy(copy: WorkingCopy, store: ContentStore, *, store_limit: int) -> Tree:
    """The copy's tree as its subagent left it (read without following anything)."""
    fd = os.open(copy.work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return read_tree(fd, store, store_limit=store_limit)
    finally:
        os.close(fd)


def _copy_dir(src: int, dst: int, prefix: str, owner: tuple[int, int] | None) -> None:
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for name in os.listdir(src):
        if not prefix and name in SKIPPED_AT_ROOT:
            continue
        try:
            info = os.stat(name, dir_fd=src, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            try:
                sub = os.open(name, dir_flags, dir_fd=src)
            except OSError:
                continue
            try:
                os.mkdir(name, 0o700, dir_fd=dst)
                out = os.open(name, dir_flags, dir_fd=dst)
                try:
                    _copy_dir(sub, out, f"{prefix}{name}/", owner)
                    os.fchmod(out, stat.S_IMODE(info.st_mode) | 0o700)
                    _chown(out, owner)
                finally:
                    os.close(out)
            finally:
                os.close(sub)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
            with contextlib.suppress(OSError):
                if owner is not None:
                    os.chown(name, *owner, dir_fd=dst, follow_symlinks=False)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(src, dst, name, info, owner)


def _copy_file(
    src: int, dst: int, name: str, seen: os.stat_result, owner: tuple[int, int] | None
) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
    except OSError:
        return
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_ino != seen.st_ino:
            return
        out = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dst,
        )
        try:
            while chunk := os.read(fd, COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
            os.fchmod(out, stat.S_IMODE(opened.st_mode))
            _chown(out, owner)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _chown(fd: int, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        with contextlib.suppress(PermissionError):
            os.fchown(fd, *owner)


def _make_writable(path: Path) -> None:
    """A sandbox may leave directories without write permission: rmtree needs it."""
    for root, dirs, _files in os.walk(path, followlinks=False):
        for d in dirs:
            with contextlib.suppress(OSError):
                p = os.path.join(root, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)


def dump_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
