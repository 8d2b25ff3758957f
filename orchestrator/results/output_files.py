"""The files a run writes where the person asked (`--junit`, `--audit-out`, the
library's and `warden mcp`'s result file), often inside the workspace: a CI job
runs `warden run --junit junit.xml` in its checkout, which sandboxes write.

A sandbox may leave a symbolic link at that name (`junit.xml -> ~/.ssh/
authorized_keys`), or a FIFO (the write would wait for a reader for good), or swap
the file's directory for a link to a host directory while the run goes on. So the
file's directory is looked at when the run begins, before any sandbox has run, and
at the end the file is written only into that same directory (its identity is
checked on the opened descriptor): as a new file made beside it (`O_EXCL`, never
through a link), then renamed over the name, which replaces a link or a FIFO
there instead of following it or waiting on it. A reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import WardenError

FILE_MODE = 0o666
"""Mode a result file is made with (before the umask), as `open(path, "w")` would."""
TEMP_SUFFIX = ".partial"


class OutputFileError(WardenError, OSError):
    """A result file could not be written where it was asked for."""


@dataclass(frozen=True)
class OutputFile:
    """A result file's path and the identity of its directory when the run began
    (None: the directory did not exist then)."""

    path: Path
    directory: tuple[int, int] | None

    @classmethod
    def at_start(cls, path: Path) -> OutputFile:
        """Call before any sandbox runs: the directory the person's path names now."""
        path = Path(os.path.abspath(path))
        try:
            info = os.stat(path.parent)
        except OSError:
            return cls(path, None)
        if not stat.S_ISDIR(info.st_mode):
            return cls(path, None)
        return cls(path, (info.st_dev, info.st_ino))


def at_start(path: Path | None, flag: str | None = None) -> OutputFile | None:
    """`OutputFile.at_start` of an optional path, its missing directories made now (as
    `pytest --junitxml` does), before any sandbox could put a link on the way. Given
    the command-line `flag` that named it, a directory that cannot be made is a usage
    error now, not a failure at the end."""
    if path is None:
        return None
    found = OutputFile.at_start(path)
    if found.directory is None:
        try:
            os.makedirs(found.path.parent, exist_ok=True)
        except OSError as exc:
            if flag is None:
                return found  # `write_output` says so at the end
            import click

            raise click.BadParameter(
                f"cannot make the directory of {path} ({exc.strerror or exc}); create it "
                "or give another path",
                param_hint=flag,
            ) from exc
        found = OutputFile.at_start(path)
    return found


def write_output(target: OutputFile, data: bytes) -> None:
    """Write `data` as the whole of `target.path` (see the module doc). Raises
    OutputFileError naming the file, what happened and the fix."""
    path = target.path
    if target.directory is None:
        raise OutputFileError(
            f"cannot write {path}: its directory did not exist when the run began (one a "
            "sandbox made may be a link out of the workspace); create it before the run"
        )
    try:
        dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputFileError(f"cannot write {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(dir_fd)
        if (info.st_dev, info.st_ino) != target.directory:
            raise OutputFileError(
                f"cannot write {path}: its directory was replaced during the run (a sandbox "
                "may have swapped it for a link); not written. Check the workspace, then "
                "run again"
            )
        _replace_in(dir_fd, path.name, data)
    except OSError as exc:
        if isinstance(exc, OutputFileError):
            raise
        raise OutputFileError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(dir_fd)


def _replace_in(dir_fd: int, name: str, data: bytes) -> None:
    temp = f".{name}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, FILE_MODE, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
