"""Replacing a file's content so that a failure never leaves it worse than it was.

The usual way (`replace`): write the new content to a temporary file beside the
target, flush and fsync it, give it the target's mode and owner, then rename it
over the target. A full disk, an exceeded quota or a read-only file system fails
before the rename, so the target keeps its old content, whole.

Special cases, each with one defined behaviour:
- a symlink: `confine` already resolved it, so the file it points to is replaced
  and the link stays a link;
- a hard-linked file (more than one name) is replaced like any other: the name
  written gets the new content, the other names keep the old (the result says
  so). Keeping the link would mean rewriting the file in place, and a sandbox
  killed during that rewrite (its deadline, a disk limit, a stop) leaves the file
  torn under every name: the new start, then the old tail. A split link is
  visible and both contents are whole; a torn file is neither. (It also keeps a
  Write from changing a file that another name, say a package manager's shared
  store, points at.)
- a file whose directory is not writable (no temporary file can be made beside
  it), or whose owner this process cannot give to a new file: rewritten in place,
  after reserving the space the new content needs (`posix_fallocate`), so a full
  disk or quota is found before a byte changes. This is the one case with a
  window where a kill tears the file; nothing else could write it at all.

A sandbox killed between the temporary file's fsync and the rename leaves the
temporary file (`TEMP_PREFIX` and 12 hex digits); the target is whole. The host
removes such leftovers (`orchestrator.lifecycle.leftovers`).

Errors the model can act on (no space, quota, read-only, permission) become
`ToolError`s that say the file is unchanged and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from sandbox_tools.errors import ToolError

TEMP_PREFIX = ".warden-tmp-"
"""Temporary files beside a target start with this; a leftover one is safe to delete."""

NEW_FILE_MODE = 0o666
"""Mode of a new file before the umask (like `open(..., "w")`)."""

_MAX_TEMP_TRIES = 8
"""Names tried for the temporary file before giving up (collisions are random)."""

_IN_PLACE_ERRNOS = frozenset({errno.EACCES, errno.EPERM})
"""A temporary file could not be made (or given the owner): rewrite in place instead."""


def fs_error(op: str, shown: str, e: OSError, *, unchanged: bool | None = True) -> ToolError:
    """A file-system failure in words the model can act on; `unchanged` says whether the
    file kept its content (None: nothing was being written)."""
    kept = {
        True: f"; {shown} is unchanged",
        False: f"; {shown} may be partly written, Read it before going on",
        None: "",
    }[unchanged]
    code = e.errno
    if code == errno.ENOSPC:
        return ToolError(
            f"cannot {op} {shown}: no space left on the device{kept}. Free space (delete "
            "build outputs or temporary files you made) or write less, then try again"
        )
    if code == errno.EDQUOT:
        return ToolError(
            f"cannot {op} {shown}: disk quota exceeded{kept}. Free space within the quota "
            "(delete files you made) or write less, then try again"
        )
    if code == errno.EROFS:
        return ToolError(
            f"cannot {op} {shown}: the file system is read-only{kept}. Files there cannot be "
            "changed from this sandbox; write somewhere else in the workspace, or report it"
        )
    if code in (errno.EACCES, errno.EPERM):
        return ToolError(
            f"cannot {op} {shown}: permission denied{kept}. This sandbox's user may not "
            "write the file or its directory; check with Bash `ls -ld` and choose another path"
        )
    return ToolError(f"cannot {op} {shown}: {e.strerror or e}{kept}")


def _umask() -> int:
    """The process umask without changing it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; some file systems refuse fsync on a directory."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _create_temp(directory: Path) -> tuple[int, Path]:
    for _ in range(_MAX_TEMP_TRIES):
        temp = directory / f"{TEMP_PREFIX}{os.urandom(6).hex()}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        return fd, temp
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(directory))


def _renamed(path: Path, data: bytes, old: os.stat_result | None) -> bool:
    """Write `data` to a temporary file and rename it over `path`. False (nothing
    changed, no temporary file left) when the temporary file cannot be made or given
    `old`'s owner; raises OSError for any other failure, `path` untouched."""
    try:
        fd, temp = _create_temp(path.parent)
    except OSError as e:
        if e.errno in _IN_PLACE_ERRNOS and old is not None:
            return False
        raise
    renamed = False
    try:
        if old is not None and (old.st_uid, old.st_gid) != _owner(fd):
            try:
                os.fchown(fd, old.st_uid, old.st_gid)
            except PermissionError:
                return False  # the finally below removes the temporary file
        mode = stat.S_IMODE(old.st_mode) if old is not None else NEW_FILE_MODE & ~_umask()
        os.fchmod(fd, mode)
        _write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temp, path)
        renamed = True
    finally:
        if fd >= 0:
            os.close(fd)
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp)
    _fsync_dir(path.parent)
    return True


def _owner(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_uid, st.st_gid


class _PartlyWrittenError(OSError):
    """An in-place rewrite failed after its first byte was written."""


def _in_place(path: Path, data: bytes, old_size: int) -> None:
    """Rewrite `path` keeping its inode (and so its other names, mode and owner). The
    space is reserved first, so no space or quota fails before the content changes."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if len(data) > old_size:
            try:
                os.posix_fallocate(fd, 0, len(data))
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, old_size)  # undo a partial reservation's growth
                    raise
        try:
            _write_all(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except OSError as e:
            raise _PartlyWrittenError(e.errno, e.strerror) from e
    finally:
        os.close(fd)


def replace(path: Path, data: bytes, shown: str, old: os.stat_result | None) -> str:
    """Give `path` the content `data`; `old` is its stat (None: it does not exist yet).
    Returns a note for the result ("" or what became of a hard link's other names).

    Raises ToolError for every file-system failure; it says whether the file is
    unchanged (always, except when an in-place rewrite fails after reserving its
    space, which only an I/O error does)."""
    try:
        if _renamed(path, data, old):
            if old is not None and old.st_nlink > 1:
                others = old.st_nlink - 1
                return (
                    f" {shown} had {others} other name(s) (hard links); they keep the "
                    "previous content"
                )
            return ""
        assert old is not None
        _in_place(path, data, old.st_size)
        return ""
    except _PartlyWrittenError as e:
        raise fs_error("write", shown, e, unchanged=False) from e
    except OSError as e:
        raise fs_error("write", shown, e) from e
