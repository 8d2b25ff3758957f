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

A check on a path still leaves a window: the engine resolves the source path again
when it mounts, so a link planted between the check and the mount would be
followed. As root, warden closes it (`PinnedSources`): what the walk opened (the
descriptor, not the path) is bind-mounted at a fresh path under `PIN_ROOT`, a
root-only directory no sandbox can write, and the engine is given that path; it is
detached once the container has started (the container keeps its own copy). The
engine cannot take the descriptor itself: its runtime mounts from a new mount
namespace, where a bind of another namespace's descriptor is refused (EINVAL).
Without root (or CAP_SYS_ADMIN), the check alone applies, and a warning says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from orchestrator import owner
from orchestrator.errors import UnsafeMountError

log = logging.getLogger(__name__)

PIN_ROOT = Path("/run/warden-pins")
"""Where pinned mount sources are bind-mounted (root only, mode 0700)."""
PIN_PREFIX = "pin-"
"""A pin is `pin-PID-START-PIDNS-XXXX`: the process that made it, its start time and
its pid namespace (`owner`), so a sweep never takes a live process's pin for a dead
one's (a reused pid, a pid of another namespace). Older wardens wrote `pin-PID-XXXX`."""
MS_BIND = 4096
MS_REC = 16384
MNT_DETACH = 2


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
    fd = open_beneath(root, relative)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def open_beneath(root: Path, relative: Path) -> int:
    """An O_PATH descriptor of `relative` under `root`, opened one component at a
    time with O_NOFOLLOW (the caller closes it). UnsafeMountError for a link."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return open_under(fd, relative, root)
    finally:
        os.close(fd)


def open_under(dir_fd: int, relative: Path, shown: Path) -> int:
    """An O_PATH descriptor of `relative` under the directory `dir_fd`, opened one
    component at a time with O_NOFOLLOW (the caller closes it; `dir_fd` stays open).
    `shown` names `dir_fd`'s directory in messages. UnsafeMountError for a link
    (or a missing component); OSError when the tree changes while it is walked."""
    fd = os.dup(dir_fd)
    try:
        walked = shown
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
    except BaseException:
        os.close(fd)
        raise
    return fd


class PinnedSources:
    """Mount sources pinned for one container start: `pin` checks a confined source
    and returns the path to give the engine; leaving the block detaches them."""

    _warned = False

    def __init__(self, pin_root: Path = PIN_ROOT) -> None:
        self._root = pin_root
        self._pins: list[Path] = []
        self._libc: ctypes.CDLL | None = None

    def __enter__(self) -> PinnedSources:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    @property
    def held(self) -> bool:
        """True while any source is pinned (never for a non-root warden)."""
        return bool(self._pins)

    def release(self) -> None:
        """Detach and remove every pin (the kernel's umount waits ~25 ms: callers may
        run this in a thread once the engine has mounted the sources)."""
        pins, self._pins = self._pins, []
        for pin in pins:
            self._call("umount2", str(pin).encode(), MNT_DETACH)
            with contextlib.suppress(OSError):
                os.rmdir(pin) if pin.is_dir() else os.unlink(pin)

    def pin(self, root: Path, source: Path) -> Path:
        """`source`, checked like `check_confined`; as root, the path of a bind mount
        of exactly what the check opened, which no later link can redirect."""
        check_confined(root, source)
        if os.geteuid() != 0:
            return source
        try:
            fd = open_beneath(root, source.relative_to(root))
        except OSError as exc:
            raise UnsafeMountError(
                f"mount source {source} changed while being checked ({exc.strerror or exc}); "
                "something is rewriting the workspace: stop it and run again"
            ) from None
        try:
            return self._bind(fd, source)
        finally:
            os.close(fd)

    def _bind(self, fd: int, source: Path) -> Path:
        with contextlib.suppress(FileExistsError):
            os.mkdir(self._root, 0o700)
        info = os.lstat(self._root)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
            raise UnsafeMountError(
                f"{self._root} (where warden pins mount sources) is not a directory only "
                "root can use; remove it and run again"
            )
        pid = os.getpid()  # so a sweep can tell a dead owner's pins from a live one's
        prefix = f"{PIN_PREFIX}{pid}-{owner.process_start(pid) or 0}-{owner.pid_namespace()}-"
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            pin = Path(tempfile.mkdtemp(prefix=prefix, dir=self._root))
        else:
            handle, name = tempfile.mkstemp(prefix=prefix, dir=self._root)
            os.close(handle)
            pin = Path(name)
        error = self._call(
            "mount", f"/proc/self/fd/{fd}".encode(), str(pin).encode(), None, MS_BIND | MS_REC, None
        )
        if error:
            with contextlib.suppress(OSError):
                os.rmdir(pin) if pin.is_dir() else os.unlink(pin)
            if not PinnedSources._warned:
                PinnedSources._warned = True
                log.warning(
                    "cannot pin mount sources (%s): a link planted in the workspace between "
                    "warden's check and the engine's mount could still be followed",
                    os.strerror(error),
                )
            return source
        self._pins.append(pin)
        return pin

    def _call(self, name: str, *args: object) -> int:
        """Call libc `name`; 0, or the errno it failed with."""
        if self._libc is None:
            self._libc = ctypes.CDLL(None, use_errno=True)
        if getattr(self._libc, name)(*args) != 0:
            return ctypes.get_errno() or 1
        return 0


def _target(path: Path) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(path)
    return "?"


def sweep_pins(pin_root: Path = PIN_ROOT) -> int:
    """Detach and remove pins whose process is provably gone (killed between pinning
    and the container's start); returns how many. Pins of live processes, and of
    processes of another pid namespace (nothing here can tell), are left alone."""
    if os.geteuid() != 0:
        return 0
    try:
        names = os.listdir(pin_root)
    except OSError:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    swept = 0
    for name in names:
        if not _pin_owner_dead(name):
            continue
        path = pin_root / name
        libc.umount2(str(path).encode(), MNT_DETACH)
        with contextlib.suppress(OSError):
            os.rmdir(path) if path.is_dir() else os.unlink(path)
            swept += 1
    return swept


def _pin_owner_dead(name: str) -> bool:
    """Whether the process that made pin `name` (see PIN_PREFIX) is provably gone."""
    parts = name.split("-")
    if len(parts) < 3 or not name.startswith(PIN_PREFIX) or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if len(parts) == 5 and parts[2].isdigit() and parts[3].isdigit():
        if int(parts[3]) != owner.pid_namespace():
            return False  # its pid means another process here, or none
        start = owner.process_start(pid)
        if start is not None and int(parts[2]):
            return start != int(parts[2])  # a different start: the pid was reused
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False
