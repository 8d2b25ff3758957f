"""Reading a file a sandbox may have written, safely: the one home of that logic.

A sandbox can leave anything where the host expects a file of the workspace: a
symbolic link to a host file, a FIFO (whose plain `open` waits for a writer, for
good, holding the run's event loop), a device, a directory, or a file swapped in
between the host's look at the path and its open. So a workspace file is opened
without following a link (unless the caller reads the person's own paths),
non-blocking, checked to be a regular file on the opened descriptor (and, given
the `(st_dev, st_ino)` the caller looked at, that very file), and read up to a
bound the caller names: at most `max_bytes + 1` bytes, so a caller can tell "over
the limit" from "exactly at it" and announce it.

What was wrong is one exception, `NotRegularFileError` (a `WardenError` and an
`OSError`, its `reason` saying "link", "not regular" or "changed"), which each
caller turns into its own package's error with its own wording and fix. Its text
(`str`, `strerror`) is what an `OSError` for the same case has always said, so a
caller that shows an `OSError` shows the same words. Any other `OSError` of the
open (gone, no permission) passes through unchanged.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Literal

from orchestrator.errors import WardenError

Reason = Literal["link", "not regular", "changed"]

NOT_REGULAR = "not a regular file"
"""The `strerror` of a `NotRegularFileError` whose reason is "not regular" (but a
directory's, which is EISDIR's own, as reading one has always said)."""

CHANGED = "changed while being read"
"""The `strerror` of a `NotRegularFileError` whose reason is "changed"."""


class NotRegularFileError(WardenError, OSError):
    """What is at the path is a symbolic link (`reason` "link", errno ELOOP), not a
    regular file ("not regular": EISDIR for a directory, EINVAL for a FIFO, a device
    or a socket), or not the file the caller looked at ("changed", ESTALE)."""

    reason: Reason = "not regular"


def _refused(reason: Reason, code: int, text: str, name: object = None) -> NotRegularFileError:
    exc = NotRegularFileError(code, text) if name is None else NotRegularFileError(code, text, name)
    exc.reason = reason
    return exc


def open_regular(
    path: str | Path,
    *,
    dir_fd: int | None = None,
    follow_links: bool = False,
    expected: os.stat_result | None = None,
) -> BinaryIO:
    """The regular file at `path` (relative to the directory `dir_fd` when given),
    open for reading (the caller closes it). Opened non-blocking and, unless
    `follow_links`, without following a link in its last component; checked on the
    opened descriptor: a regular file and, given `expected`, the same `(st_dev,
    st_ino)`. NotRegularFileError when not; other OSErrors of the open unchanged."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if follow_links or exc.errno != errno.ELOOP:
            raise
        raise _refused("link", exc.errno, exc.strerror or os.strerror(exc.errno), exc.filename) from exc
    try:
        opened = os.fstat(fd)
        if stat.S_ISDIR(opened.st_mode):  # worded as reading a directory always was
            raise _refused("not regular", errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(opened.st_mode):
            raise _refused("not regular", errno.EINVAL, NOT_REGULAR)
        if expected is not None and (opened.st_dev, opened.st_ino) != (
            expected.st_dev,
            expected.st_ino,
        ):
            raise _refused("changed", errno.ESTALE, CHANGED)
        return os.fdopen(fd, "rb")  # checked first: a directory's descriptor raises here
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | Path,
    max_bytes: int,
    *,
    dir_fd: int | None = None,
    follow_links: bool = False,
    expected: os.stat_result | None = None,
) -> bytes:
    """At most `max_bytes + 1` bytes of the regular file `open_regular` opens: more
    than `max_bytes` back means the file is over the caller's limit."""
    with open_regular(path, dir_fd=dir_fd, follow_links=follow_links, expected=expected) as f:
        return f.read(max_bytes + 1)
