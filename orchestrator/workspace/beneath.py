"""Reading a tree a sandbox writes, one directory at a time, never through a link.

A sandbox (of this run, a concurrent one, or a background task) may swap any
directory of the workspace for a symbolic link, or a file for a FIFO, at any
moment, including between the host's look at an entry and its use. A walk that
lists `dir`, sees `dir/sub` is a directory and later lists the path `dir/sub`
would follow a link swapped in meanwhile and list (or hash) a host directory.
So a directory is opened from the workspace's own descriptor down, each
component with `O_NOFOLLOW` (`backend.mounts.open_under`), and a file from its
directory's descriptor, non-blocking, checked to be a regular file on the
opened descriptor, and read up to a bound. Python 3.11 exposes no `openat2`
(`RESOLVE_BENEATH`), hence the walk.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from orchestrator import regular_file
from orchestrator.backend.mounts import open_under
from orchestrator.errors import UnsafeMountError


@contextlib.contextmanager
def workspace_root(workspace: Path) -> Iterator[int | None]:
    """An `O_PATH` descriptor of the workspace itself (its own path is the person's,
    links and all); None when it cannot be opened (then nothing under it can)."""
    try:
        fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def open_directory(root: int | None, parts: tuple[str, ...], shown: Path) -> int | None:
    """A readable descriptor of the directory `parts` below `root` (the caller closes
    it), or None when it is gone, is no directory, or is or lies under a link now."""
    if root is None:
        return None
    try:
        path_fd = open_under(root, Path(*parts), shown)
    except (UnsafeMountError, OSError):
        return None
    try:
        return directory_at(path_fd, ".")
    finally:
        os.close(path_fd)


@contextlib.contextmanager
def directory(root: int | None, parts: tuple[str, ...], shown: Path) -> Iterator[int | None]:
    """`open_directory` for a `with` block: the descriptor (None when it is not a
    directory reachable without a link now), closed when the block ends."""
    fd = open_directory(root, parts, shown)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def directory_at(dir_fd: int, name: str) -> int | None:
    """A readable descriptor of the directory `name` in `dir_fd`, not through a link
    (None when it is not a directory now)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None


def read_regular(dir_fd: int, name: str, max_bytes: int) -> bytes | None:
    """At most `max_bytes + 1` bytes of the regular file `name` in `dir_fd`; None when
    it is not one now (a link, a FIFO, a device, a directory, gone). Opened without
    following a link and non-blocking, and checked on the opened descriptor, so a
    FIFO swapped in after the caller's look neither blocks nor is read
    (`regular_file.read_regular`)."""
    try:
        return regular_file.read_regular(name, max_bytes, dir_fd=dir_fd)
    except OSError:
        return None
