"""A dev container as read once: its devcontainer.json's bytes, what warden makes
of them, and the hash of the build context its Dockerfile is built from, as the
tar the engine would be sent (`DevContainerInputs`, `BuildContext`).

Trust binds to content (`workspace.trusted_content`): the person's yes covers the
config's bytes and the context tar's hash. Reading the inputs hashes the tar's
entries as they are written, into nothing: no tar is kept, so a run that builds
nothing (an `--image`, an untrusted workspace, an image already built from the
same hash) and the end-of-run trust review make none. A build makes the tar once,
then (`BuildContext.copy_to`), hashing it the same way as it is written, and sends
it only when that hash is the one read: a file changed since (the Dockerfile,
anything the build could `COPY`, a `.dockerignore`, a link swapped in), by a
sandbox of a concurrent run or anyone, is not built at all.

The tar is warden's own, not the docker SDK's: the SDK checks a file's type by its
path and then opens the path, so a sandbox that swapped a file for a link in
between would have a host file's bytes sent to the engine (and, with a COPY, into
the image). Every entry is opened from its directory's descriptor with O_NOFOLLOW,
from the workspace down, and described by what was opened; links stay links.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from orchestrator.backend.mounts import open_beneath, open_under
from orchestrator.errors import ConfigError, ImageBuildError, UnsafeMountError, WardenError
from orchestrator.images.devcontainer import (
    CONFIG_PATHS,
    DevContainer,
    parse_devcontainer,
    read_config,
    read_regular,
)
from orchestrator.regular_file import NotRegularFileError, open_regular

RECIPE = "devcontainer-build 2"
"""Part of the tag's hash: a change to how warden builds (2: the engine gets warden's
Dockerfile, `images.buildfile`) never reuses an image an older warden built."""
DOCKERIGNORE = ".dockerignore"
"""The build's ignore file, at the root of its context (read from the opened context)."""
MAX_CONTEXT_BYTES = 512 * 1024 * 1024
"""Largest build context (as a tar) sent to the engine."""
MAX_DOCKERFILE_BYTES = 1024 * 1024
"""Largest Dockerfile warden reads to check before a build."""


@dataclass(frozen=True, eq=False)
class BuildContext:
    """One build's context as read once: the hash of the tar the engine is to be sent
    (the tar itself is made only for a build: `copy_to`)."""

    digest: str
    """sha256 (hex) of the tar's entries, the Dockerfile's name, args and target:
    the tag's hash, and what trust records."""
    dockerfile: str
    """The Dockerfile's name in the context."""
    dockerfile_bytes: bytes
    """The Dockerfile as the tar holds it (what the build checks and rewrites)."""
    listing: tuple[str, ...]
    """One line per entry: its fingerprint, mode and name (what `warden trust` shows)."""
    dev: DevContainer = field(repr=False)
    """The dev container it was read for (where `copy_to` reads the context again)."""

    def copy_to(self, out: IO[bytes]) -> None:
        """The context as a tar into `out` (an empty file the build may then append
        to), made now and hashed as it is written. Raises ImageBuildError, with `out`
        holding nothing the build may send, when its hash is not `digest`: a file
        changed since the context was read (and trust decided on it)."""
        made = _write_tar(self.dev, self.dockerfile, out)
        if made.digest.hexdigest() != self.digest:
            out.seek(0)
            out.truncate()
            raise ImageBuildError(
                f"{self.dev.relative}: the build context {self.dev.context} changed after "
                "warden read it for this run (trust and the image's tag were decided on "
                "what was read), so it is not built; something is rewriting the "
                "workspace: stop it and run again"
            )
        out.seek(0)


def read_build_context(dev: DevContainer) -> BuildContext:
    """The dev container's build context, hashed now as the tar a build would send
    (the tar goes nowhere). Raises ConfigError (too large, the Dockerfile outside the
    context or not a regular file) or ImageBuildError (the context changed while it
    was read)."""
    dockerfile = _dockerfile_in_context(dev)
    made = _write_tar(dev, dockerfile, _Discard())
    if made.named is None:
        raise ConfigError(
            f"cannot read {dev.relative}'s Dockerfile: not a regular file (a FIFO, a "
            "device, a link or a directory); replace it with the file, or run with "
            "--no-devcontainer"
        )
    return BuildContext(made.digest.hexdigest(), dockerfile, made.named, tuple(made.listing), dev)


@dataclass(frozen=True, eq=False)
class DevContainerInputs:
    """The workspace's dev container as read once (see the module doc)."""

    relative: str
    """Its devcontainer.json, relative to the workspace."""
    raw: bytes | None
    """That file's bytes as read (None: it could not be read)."""
    dev: DevContainer | None
    """What warden makes of them (None: see `error`)."""
    context: BuildContext | None = None
    """The build context, for a Dockerfile build whose context could be read."""
    error: WardenError | None = None
    """Why the config, or its build context, cannot be used."""

    def config(self) -> DevContainer:
        """The parsed config; raises the error that kept it from being read."""
        if self.dev is None:
            assert self.error is not None
            raise self.error
        return self.dev

    def build_context(self) -> BuildContext:
        """The build context; raises the error that kept it from being made."""
        if self.context is None:
            raise self.error or ConfigError(f"{self.relative} builds no Dockerfile")
        return self.context


def read_devcontainer(workspace: Path) -> DevContainerInputs | None:
    """The workspace's dev container read once (None: it has no devcontainer.json):
    the config's bytes, parsed, and for a Dockerfile build the context as a tar.
    Errors are kept, to be raised where the dev container is used."""
    root = workspace.resolve()
    relative = next((r for r in CONFIG_PATHS if os.path.lexists(root / r)), None)
    if relative is None:
        return None
    try:
        raw = read_config(root, root / relative, relative)
    except ConfigError as exc:
        return DevContainerInputs(relative, None, None, error=exc)
    try:
        dev = parse_devcontainer(root, root / relative, relative, raw=raw)
    except ConfigError as exc:
        return DevContainerInputs(relative, raw, None, error=exc)
    if dev.dockerfile is None:
        return DevContainerInputs(relative, raw, dev)
    try:
        context = read_build_context(dev)
    except (ConfigError, ImageBuildError) as exc:
        return DevContainerInputs(relative, raw, dev, error=exc)
    return DevContainerInputs(relative, raw, dev, context=context)


def _dockerfile_in_context(dev: DevContainer) -> str:
    assert dev.dockerfile is not None and dev.context is not None
    try:
        return dev.dockerfile.relative_to(dev.context).as_posix()
    except ValueError:
        raise ConfigError(
            f"{dev.relative}: the Dockerfile {dev.dockerfile} is outside the build context "
            f"{dev.context}; move it into the context (or set build.context)"
        ) from None


def _context_tar(dev: DevContainer, into: IO[bytes]) -> str:
    """Write the build context as a tar into `into`; its content hash."""
    return _write_tar(dev, _dockerfile_in_context(dev), into).digest.hexdigest()


class _Discard:
    """Where a tar goes that is only hashed: its bytes counted, then dropped."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.written


class _Hashed:
    """The content hash of a context tar, taken as its entries are written: each
    entry's name, type, mode and link target, then its bytes, in name order (the
    order they are written in). Also one listing line per entry (`sha256:HEX`,
    `link:TARGET` or the entry's type, then its mode and name) and the Dockerfile's
    bytes as the tar holds them (None: not a regular file there)."""

    def __init__(self, dev: DevContainer, dockerfile: str) -> None:
        self.dev = dev
        self.dockerfile = dockerfile
        self.digest = hashlib.sha256(f"{RECIPE}\ndockerfile {dockerfile}\n".encode())
        self.digest.update(f"args {sorted(dev.args)}\ntarget {dev.target}\n".encode())
        self.listing: list[str] = []
        self.named: bytes | None = None

    def header(self, info: tarfile.TarInfo) -> None:
        # A name (or link target) may be any bytes a sandbox chose: hashed as those
        # bytes, listed with the ones that are not UTF-8 spelt `\xNN`.
        self.digest.update(
            f"{info.name}\0{info.type!r}\0{info.mode:o}\0{info.linkname}\0".encode(
                "utf-8", "surrogateescape"
            )
        )
        if not info.isfile():
            shown = f"link:{_shown(info.linkname)}" if info.issym() else (
                "directory" if info.isdir() else "other"
            )
            self.listing.append(f"{shown} {info.mode:o} {_shown(info.name)}")

    def content(self, info: tarfile.TarInfo, source: IO[bytes]) -> _HashedContent:
        keep = info.name == self.dockerfile
        if keep and info.size > MAX_DOCKERFILE_BYTES:
            raise ConfigError(
                f"{self.dev.relative}'s Dockerfile is larger than {MAX_DOCKERFILE_BYTES} "
                "bytes; not read"
            )
        return _HashedContent(self, info, source, keep)


class _HashedContent:
    """A regular file's bytes as the tar copies them: into the context's hash and
    the file's own, and kept when it is the Dockerfile."""

    def __init__(self, hashed: _Hashed, info: tarfile.TarInfo, source: IO[bytes], keep: bool):
        self.hashed, self.info, self.source, self.keep = hashed, info, source, keep
        self.one = hashlib.sha256()
        self.kept: list[bytes] = []

    def read(self, size: int = -1) -> bytes:
        block = self.source.read(size)
        self.hashed.digest.update(block)
        self.one.update(block)
        if self.keep:
            self.kept.append(block)
        return block

    def done(self) -> None:
        info = self.info
        self.hashed.listing.append(
            f"sha256:{self.one.hexdigest()} {info.mode:o} {_shown(info.name)}"
        )
        if self.keep:
            self.hashed.named = b"".join(self.kept)


def _shown(name: str) -> str:
    """`name` as UTF-8 text: bytes that are not UTF-8 (a file system name read with
    `surrogateescape`) become `\\xNN`."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _write_tar(dev: DevContainer, dockerfile: str, into: IO[bytes] | _Discard) -> _Hashed:
    from docker.utils.build import exclude_paths

    hashed = _Hashed(dev, dockerfile)

    assert dev.context is not None
    try:
        # The context directory, walked down from the workspace with no link followed
        # (`parse_devcontainer` sets both for a Dockerfile build).
        assert dev.workspace is not None
        root = open_beneath(dev.workspace, dev.context.relative_to(dev.workspace))
        try:
            exclude = _dockerignore(root, dev.context)
            # The SDK's own list (its .dockerignore rules; the Dockerfile always in it).
            files = sorted(exclude_paths(str(dev.context), exclude or [], dockerfile=dockerfile))
            with tarfile.open(mode="w", fileobj=into) as archive:  # type: ignore[call-overload]
                for name in files:
                    _add_entry(archive, root, name, dev.context, hashed)
                    if archive.offset > MAX_CONTEXT_BYTES:
                        raise _too_large(dev, archive.offset)
        finally:
            os.close(root)
    except (UnsafeMountError, OSError) as exc:
        raise ImageBuildError(
            f"{dev.relative}: the build context {dev.context} changed while it was read "
            f"({getattr(exc, 'strerror', None) or exc}); something is rewriting the "
            "workspace (a sandbox may be swapping files for links): stop it and build again"
        ) from None
    size = into.tell()
    if size > MAX_CONTEXT_BYTES:
        raise _too_large(dev, size)
    return hashed


def _too_large(dev: DevContainer, size: int) -> ConfigError:
    return ConfigError(
        f"{dev.relative}: the build context {dev.context} is {size} bytes or more, more "
        f"than {MAX_CONTEXT_BYTES}; add a .dockerignore or a smaller build.context"
    )


def _add_entry(
    archive: tarfile.TarFile, root: int, name: str, shown: Path, hashed: _Hashed
) -> None:
    """Add the context's entry `name` as what was opened under `root`, hashed as it
    is added: a regular file's bytes from its own descriptor, a link as a link, a
    directory as one; sockets and device nodes are left out. OSError when it changed
    meanwhile."""
    parent, base = posixpath.split(name)
    at = open_under(root, Path(parent), shown) if parent else os.dup(root)
    try:
        found = os.stat(base, dir_fd=at, follow_symlinks=False)
        info = tarfile.TarInfo(name)
        info.mode = stat.S_IMODE(found.st_mode)
        info.uid, info.gid = found.st_uid, found.st_gid
        info.mtime = min(max(int(found.st_mtime), 0), 8**11 - 1)
        if stat.S_ISREG(found.st_mode):
            # A FIFO swapped in is opened without waiting, then refused.
            try:
                content = open_regular(base, dir_fd=at)
            except NotRegularFileError as exc:
                if exc.reason != "not regular":
                    raise
                raise OSError(errno.ESTALE, f"{name} is no longer a regular file") from None
            with content:
                info.size = os.fstat(content.fileno()).st_size
                if archive.offset + info.size > MAX_CONTEXT_BYTES:
                    # Before a byte is copied: a sparse file a sandbox made with
                    # `truncate -s 1T` would fill the host's disk with zeros.
                    raise ConfigError(
                        f"{name} in the build context {shown} is {info.size} bytes: the "
                        f"context would pass {MAX_CONTEXT_BYTES} bytes; add it to "
                        ".dockerignore or choose a smaller build.context"
                    )
                hashed.header(info)
                copied = hashed.content(info, content)
                archive.addfile(info, copied)  # a file that shrank meanwhile: OSError
                copied.done()
        elif stat.S_ISDIR(found.st_mode):
            info.type = tarfile.DIRTYPE
            hashed.header(info)
            archive.addfile(info)
        elif stat.S_ISLNK(found.st_mode):
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(base, dir_fd=at)
            hashed.header(info)
            archive.addfile(info)
        elif stat.S_ISFIFO(found.st_mode):
            info.type = tarfile.FIFOTYPE
            hashed.header(info)
            archive.addfile(info)
    finally:
        os.close(at)


def _dockerignore(root: int, context: Path) -> list[str] | None:
    """The patterns of the context's .dockerignore, read from the context directory
    opened by the no-link walk (`root`): a link swapped in above it is not followed."""
    path = context / DOCKERIGNORE
    try:
        found = os.stat(DOCKERIGNORE, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    # Read as any workspace file: a FIFO swapped in after the check never blocks.
    raw = read_regular(
        Path(DOCKERIGNORE), f"{path} (the build's .dockerignore)", MAX_DOCKERFILE_BYTES,
        dir_fd=root,
    )  # fmt: skip
    if len(raw) > MAX_DOCKERFILE_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_DOCKERFILE_BYTES} bytes")
    lines = [line.strip() for line in raw.decode(errors="replace").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]
