"""Where broker socket directories live, which workspaces may not include them,
and the ones a dead orchestrator left behind.

**Where.** Every socket directory (broker, egress, warm-pool hold, hook sandbox)
is made by `broker.listener.make_socket_dir` under `socket_root()`: `/run/warden`
for root, `$XDG_RUNTIME_DIR/warden` for a user who has one, else
`$TMPDIR/warden-<uid>`. The root is this user's own (never a link, not writable by
anyone else; mode 0711: a sandbox may pass through to its own directory, whose
group only it holds, nobody may list or create entries), so no other local user can plant or pre-create
anything in it. Each directory is mounted into exactly one container;
`check_workspace_excludes` refuses a workspace that contains the socket root or
warden's state dir (a sandbox of that workspace would reach every other
sandbox's socket, transcripts and store).

**Leftovers.** Each socket directory (`ROOT/warden-sock-XXXX`) gets a sibling
marker `warden-sock-XXXX.warden-owner`
(written by `mark`, which the task manager calls) holding the identity of the process
that made it (`owner.Owner`, JSON,
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

from orchestrator import owner
from orchestrator.config import Settings
from orchestrator.errors import ConfigError

log = logging.getLogger(__name__)

ROOT_SOCKET_ROOT = Path("/run/warden")
"""The socket root of a warden run as root."""
SOCKET_ROOT_MODE = 0o711
"""Others may pass through (a sandbox to its own directory), never list or create."""
MARKER_SUFFIX = ".warden-owner"
"""Marks the entry named before it as a directory some warden process made."""
MAX_MARKER_CHARS = 4096
"""A marker is a few hundred bytes; a longer one is not ours and is not parsed whole."""
MAX_SOCKET_DIRS_SCANNED = 10_000
"""This user's markers one sweep looks at (other users' entries are not counted);
past that it stops and says so (the next sweep goes on)."""


def socket_root() -> Path:
    """This user's socket root, made if missing; ConfigError when it exists but is not
    provably this user's own (a link, another owner, writable by others)."""
    uid = os.geteuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if uid == 0:
        root = ROOT_SOCKET_ROOT
    elif runtime and _owned_dir(Path(runtime)):
        root = Path(runtime) / "warden"
    else:
        root = Path(tempfile.gettempdir()) / f"warden-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, SOCKET_ROOT_MODE)
    if not _owned_dir(root):
        raise ConfigError(
            f"{root} (where warden keeps its sockets) is not a directory of this user's "
            "own that only it can write: another user may have made it, to see or hijack "
            "warden's sockets. Remove it (as its owner or root), or point TMPDIR at a "
            "directory of your own"
        )
    os.chmod(root, SOCKET_ROOT_MODE)
    return root


def _owned_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def check_workspace_excludes(workspace: Path, settings: Settings) -> None:
    """ConfigError when `workspace` contains (or lies inside) warden's sockets or
    state: a sandbox of it would reach other sandboxes' brokers and every run's
    records."""
    ws = Path(os.path.realpath(workspace))
    for what, path, fix in (
        ("broker sockets", socket_root(), "point TMPDIR (or XDG_RUNTIME_DIR) elsewhere"),
        ("state (store, run logs)", settings.state_dir, "move it with WARDEN_STATE_DIR"),
    ):
        real = Path(os.path.realpath(path))
        if _within(real, ws) or _within(ws, real):
            raise ConfigError(
                f"workspace {workspace} contains warden's {what} at {real}: a sandbox "
                "there could reach other sandboxes' sockets and every run's records. "
                f"Run warden from a project directory (--workspace DIR), or {fix}"
            )


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


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
    made = False
    try:
        fd = os.open(marker_of(socket_dir), flags, 0o600)
        made = True
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(me.to_json())
    except BaseException:
        # Unmarked, no sweep would ever remove it (out of descriptors, EMFILE, is the
        # usual cause): the directory is still empty, so it goes now.
        if made:
            with contextlib.suppress(OSError):
                marker_of(socket_dir).unlink()
        with contextlib.suppress(OSError):
            os.rmdir(socket_dir)
        raise
    return socket_dir


def remove(socket_dir: Path) -> bool:
    """Remove a socket directory and its marker (what was not there is fine); True
    when the directory is gone.

    Listing a directory takes a descriptor: out of them (EMFILE), `rmtree` removes
    nothing, and the directory goes only if it is already empty (every socket's
    owner unlinks its own file on close, by path). A directory that stays keeps its
    marker, so the next `sweep` after this process ends removes it; the caller may
    try again sooner (the warm pool does when it closes)."""
    shutil.rmtree(socket_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(socket_dir)  # no descriptor needed: works when rmtree could not list
    if os.path.lexists(socket_dir):
        log.warning(
            "could not remove the socket directory %s yet (out of descriptors?); it is "
            "removed later, by this run or by the next cleanup",
            socket_dir,
        )
        return False
    with contextlib.suppress(FileNotFoundError):
        marker_of(socket_dir).unlink()
    return True


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the socket directories under `root` (default: the socket root, then the
    temp dir, where older wardens kept them) whose owner is provably dead; return
    them. Blocking; never raises for one bad entry."""
    if root is None:
        try:
            own = socket_root()
        except ConfigError as exc:
            log.warning("%s", exc)
            return sweep(Path(tempfile.gettempdir()))
        return sweep(own) + sweep(Path(tempfile.gettempdir()))
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
            try:  # only this user's markers count toward the cap
                if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                    continue
            except OSError:
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
            if _dead_owners(Path(entry.path), socket_dir) and remove(socket_dir):
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
