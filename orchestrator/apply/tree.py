"""Reading a tree a sandbox may have written, on the host, without following
anything in it: the one walk both sides of a change set come from (the workspace
when a working copy is made, the copy when its subagent has ended).

Every directory is opened from its parent's descriptor with `O_NOFOLLOW`, every
entry looked at with `lstat` on that descriptor, every file opened from it with
`O_NOFOLLOW | O_NONBLOCK` and checked on the opened descriptor to be the regular
file the `lstat` saw. A symbolic link is read as its target text, never
followed; a FIFO, socket or device is skipped (and said); a file with more than
one hard link is marked (`Entry.hard_link`), so policy can refuse it. A regular
file's bytes are copied into the `ContentStore` while it is open (up to the cap),
so what is reviewed and applied is what was read then, whatever the tree does
afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.apply.changeset import ApplyError, ContentStore

MAX_ENTRIES = 200_000
"""Most entries one walk reads; past it the walk stops with an error."""
MAX_DEPTH = 64
"""Deepest directory nesting a walk follows."""
TEXT_SNIFF_BYTES = 8192
"""How much of a file decides whether it is text (no NUL, valid UTF-8)."""
SKIPPED_AT_ROOT = (".git",)
"""Never part of a working copy: the workspace's own `.git` is mounted read-only
in the copy's sandbox instead (a sandbox never gets a writable repository)."""


class TreeTooLargeError(ApplyError, OSError):
    """A tree has more entries or deeper nesting than a working copy may."""


@dataclass(frozen=True)
class Entry:
    """One path of a tree as it was read."""

    type: Literal["file", "symlink"]
    mode: int = 0
    """Permission bits (files)."""
    size: int = 0
    sha256: str | None = None
    """Of the file's content (files)."""
    stored: bool = False
    """The content is in the store (not over the cap)."""
    binary: bool = False
    link_target: str | None = None
    hard_link: bool = False
    """The file had more than one link when it was read."""


@dataclass
class Tree:
    """Every file and link of a tree by POSIX path, and what the walk skipped."""

    entries: dict[str, Entry] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Paths that are neither file, link nor directory (FIFOs, sockets, devices) or
    that changed while being read."""
    empty_dirs: set[str] = field(default_factory=set)
    """Directories that held nothing at all (a directory with files or links in it
    is known by their paths)."""


def is_binary(head: bytes) -> bool:
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a character cut at the sniff's end is text
    return False


def read_tree(root_fd: int, store: ContentStore, *, store_limit: int) -> Tree:
    """Walk the directory `root_fd` (not closed). Regular files' content up to
    `store_limit` bytes each goes into `store`. TreeTooLargeError past the bounds."""
    tree = Tree()
    _walk(root_fd, "", tree, store, store_limit, 0)
    return tree


def _walk(
    dir_fd: int, prefix: str, tree: Tree, store: ContentStore, limit: int, depth: int
) -> None:
    if depth > MAX_DEPTH:
        raise TreeTooLargeError(f"{prefix} is nested deeper than {MAX_DEPTH} directories")
    names = sorted(os.listdir(dir_fd))
    if prefix and not names:
        tree.empty_dirs.add(prefix.rstrip("/"))
    for name in names:
        if not prefix and name in SKIPPED_AT_ROOT:
            continue
        path = f"{prefix}{name}"
        if len(tree.entries) + len(tree.skipped) >= MAX_ENTRIES:
            raise TreeTooLargeError(
                f"more than {MAX_ENTRIES} files: too many for a working copy; run this "
                "subagent without isolation: worktree"
            )
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            with _subdir(dir_fd, name) as sub:
                if sub is None:
                    tree.skipped.append(path)
                else:
                    _walk(sub, f"{path}/", tree, store, limit, depth + 1)
        elif stat.S_ISLNK(info.st_mode):
            try:
                tree.entries[path] = Entry(
                    type="symlink", link_target=os.fsdecode(os.readlink(name, dir_fd=dir_fd))
                )
            except OSError:
                tree.skipped.append(path)
        elif stat.S_ISREG(info.st_mode):
            entry = _read_file(dir_fd, name, info, store, limit)
            if entry is None:
                tree.skipped.append(path)
            else:
                tree.entries[path] = entry
        else:
            tree.skipped.append(path)


@contextlib.contextmanager
def _subdir(dir_fd: int, name: str) -> Iterator[int | None]:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _read_file(
    dir_fd: int, name: str, seen: os.stat_result, store: ContentStore, limit: int
) -> Entry | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
            seen.st_dev,
            seen.st_ino,
        ):
            return None  # swapped between the look and the open
        head = os.pread(fd, TEXT_SNIFF_BYTES, 0)
        sha, size, stored = store.put_fd(fd, limit)
    finally:
        os.close(fd)
    return Entry(
        type="file",
        mode=stat.S_IMODE(opened.st_mode),
        size=size,
        sha256=sha,
        stored=stored,
        binary=is_binary(head),
        hard_link=opened.st_nlink > 1,
    )


def tree_hash(tree: Tree) -> str:
    """One hash of every path, type, mode, content hash and link target."""
    digest = hashlib.sha256()
    for path, e in sorted(tree.entries.items()):
        digest.update(
            repr((path, e.type, e.mode, e.sha256, e.link_target)).encode("utf-8", "surrogatepass")
        )
    return digest.hexdigest()
