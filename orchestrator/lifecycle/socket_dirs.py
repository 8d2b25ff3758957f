"""Broker socket directories a dead orchestrator left behind.

Each broker socket directory (`$TMPDIR/warden-sock-XXXX`, made by
`broker.listener.make_socket_dir`) gets a sibling marker `warden-sock-XXXX.warden-owner`
(written by `mark`, which the task manager calls) holding the identity of the process
that made it (`lifecycle.owner.Owner`, JSON,
mode 0600). The marker sits beside the directory, not in it: the directory is
mounted into a sandbox, and the sandbox has no business reading host identities.

A process that is SIGKILLed never removes its directories. `sweep` (run by
`recovery.recover`, so by every `warden run`/`resume`, and by `warden cleanup`)
removes a directory and its marker when the marker's owner is provably dead
(`owner.is_dead`), never a live one's, and never one whose owner it cannot check.
Only entries this user owns and that are not symbolic links are touched (the temp
dir is shared with every other user). Directories without a marker (made by an
older warden) are left alone: nothing proves their owner is gone.

Written by hand: the marker is one small file; no library tracks temp directories
across processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from orchestrator.lifecycle import owner

log = logging.getLogger(__name__)

MARKER_SUFFIX = ".warden-owner"
"""Marks the entry named before it as a directory some warden process made."""
MAX_MARKER_CHARS = 4096
"""A marker is a few hundred bytes; a longer one is not ours and is not parsed whole."""
MAX_SOCKET_DIRS_SCANNED = 10_000
"""Markers one sweep looks at; past that it stops and says so (the next sweep goes on)."""


def marker_of(socket_dir: Path) -> Path:
    return socket_dir.with_name(socket_dir.name + MARKER_SUFFIX)


def mark(socket_dir: Path) -> Path:
    """Record this process as the owner of `socket_dir` (a fresh marker, never a link);
    returns `socket_dir`."""
    pid = os.getpid()
    me = owner.Owner(
        host=owner.host_id(),
        boot=owner.boot_id(),
        pid=pid,
        start=owner.process_start(pid) or 0,
        state="",  # liveness does not need the state dir; any state dir's sweep may act
    )
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(marker_of(socket_dir), flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(me.to_json())
    return socket_dir


def remove(socket_dir: Path) -> None:
    """Remove a socket directory and its marker (what was not there is fine)."""
    shutil.rmtree(socket_dir, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        marker_of(socket_dir).unlink()


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the socket directories under `root` (default: the temp dir) whose owner
    is provably dead; return them. Blocking; never raises for one bad entry."""
    root = root or Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = os.scandir(root)
    except OSError as exc:
        log.warning("could not list %s for leftover broker sockets: %s", root, exc)
        return removed
    scanned = 0
    with entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(MARKER_SUFFIX) or name == MARKER_SUFFIX:
                continue
            scanned += 1
            if scanned > MAX_SOCKET_DIRS_SCANNED:
                log.warning(
                    "more than %d broker socket markers in %s; the rest are left for the "
                    "next cleanup",
                    MAX_SOCKET_DIRS_SCANNED,
                    root,
                )
                break
            socket_dir = root / name.removesuffix(MARKER_SUFFIX)
            if _dead_owners(Path(entry.path), socket_dir):
                remove(socket_dir)
                removed.append(socket_dir)
    return removed


def _dead_owners(marker: Path, socket_dir: Path) -> bool:
    """True when the marker and the directory are ours, real, and the owner is dead."""
    try:
        st = os.lstat(marker)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return False
        with contextlib.suppress(FileNotFoundError):
            dir_st = os.lstat(socket_dir)
            if not stat.S_ISDIR(dir_st.st_mode) or dir_st.st_uid != os.getuid():
                return False
        text = marker.read_text(encoding="utf-8")[:MAX_MARKER_CHARS]
    except (OSError, ValueError):
        return False
    identity = owner.Owner.from_json(text)
    return identity is not None and owner.is_dead(identity)
