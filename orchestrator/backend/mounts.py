"""Checks on bind-mount sources that lie inside a directory a sandbox can write.

A sandbox writes the workspace, so anything under it may have been swapped for
a symbolic link since warden last looked: a `.git` that now points at a host
directory would be bind-mounted into the next sandbox, host files and all. A
mount whose `Mount.confined_to` is set is therefore checked component by
component with `O_NOFOLLOW` (no link anywhere between the root and the source),
and the identity (device, inode) of what was opened is compared with what the
path names now. The backend runs this immediately before it asks the engine to
create the container. The standard library does this; no library offers a
"resolve beneath" walk on Python 3.11 (`openat2` is not exposed).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from orchestrator.errors import UnsafeMountError


def check_confined(root: Path, source: Path) -> os.stat_result:
    """The stat of `source`, proven to be `root` or under it with no symlink on the way.

    `root` must be an absolute path without symlinks (a resolved workspace).
    Raises UnsafeMountError naming the path and the fix.
    """
    if not root.is_absolute() or not source.is_absolute():
        raise UnsafeMountError(f"mount source {source} and its root {root} must be absolute")
    try:
        relative = source.relative_to(root)
    except ValueError:
        raise UnsafeMountError(
            f"mount source {source} is outside {root}; warden only mounts paths inside the "
            "workspace"
        ) from None
    if any(part in ("..", ".") for part in relative.parts):
        raise UnsafeMountError(f"mount source {source} has '.' or '..' components")
    if Path(os.path.realpath(root)) != root:
        raise UnsafeMountError(
            f"workspace {root} has a symbolic link in its path; pass its resolved path "
            f"({os.path.realpath(root)})"
        )
    try:
        opened = _walk(root, relative)
        now = os.stat(source)  # what the engine will mount: the path, followed
    except OSError as exc:
        # A component was removed, or flipped between a directory and a link, while
        # it was checked (ENOENT, ENOTDIR, ELOOP...): refuse this mount, say why.
        raise UnsafeMountError(
            f"mount source {source} changed while being checked ({exc.strerror or exc}); "
            "something is rewriting the workspace (a sandbox may be swapping a directory "
            "for a link): stop it and run again"
        ) from None
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        raise UnsafeMountError(
            f"mount source {source} changed while being checked (swapped for another file); "
            "something is rewriting the workspace: stop it and run again"
        )
    return opened


def _walk(root: Path, relative: Path) -> os.stat_result:
    """Open `relative` under `root` one component at a time with O_NOFOLLOW; the stat
    of what was opened. UnsafeMountError for a link; OSError when the tree changes."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        walked = root
        for part in relative.parts:
            walked = walked / part
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise UnsafeMountError(f"mount source {walked} does not exist") from None
            if stat.S_ISLNK(info.st_mode):
                raise UnsafeMountError(
                    f"{walked} is a symbolic link (to {_target(walked)}); warden refuses to "
                    "mount through links in the workspace, since a sandbox may have made it. "
                    f"Check it, then replace it with a real directory or file (or remove it)"
                )
            nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):  # flipped to a link after the stat
                raise UnsafeMountError(
                    f"{walked} became a symbolic link while being checked; warden refuses "
                    "to mount through links in the workspace"
                )
        return os.fstat(fd)
    finally:
        os.close(fd)


def _target(path: Path) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(path)
    return "?"
