"""A dev container as read once: its devcontainer.json's bytes, what warden makes
of them, and the build context its Dockerfile is built from, as the tar the
engine is sent (`DevContainerInputs`, `BuildContext`).

Trust binds to content (`workspace.trusted_content`): the person's yes covers the
config's bytes and the context tar's hash, and the build sends exactly that tar,
made once, never the workspace as it is later. So a file changed after the yes
(the Dockerfile, anything the build could `COPY`, a `.dockerignore`, a link
swapped in), by a sandbox of a concurrent run or anyone, is either in the tar
that was hashed and shown, or not built at all.

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
import shutil
import stat
import tarfile
import tempfile
import weakref
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
    """One build's context as made once: the tar the engine is sent, and its hash."""

    digest: str
    """sha256 (hex) of the tar's entries, the Dockerfile's name, args and target:
    the tag's hash, and what trust records."""
    dockerfile: str
    """The Dockerfile's name in the context."""
    dockerfile_bytes: bytes
    """The Dockerfile as the tar holds it (what the build checks and rewrites)."""
    listing: tuple[str, ...]
    """One line per entry: its fingerprint, mode and name (what `warden trust` shows)."""
    tar: IO[bytes] = field(repr=False)
    """A private temporary file holding the tar (read with `copy_to`); closed with
    `close`, or when this context is dropped."""

    def __post_init__(self) -> None:
        weakref.finalize(self, self.tar.close)

    def close(self) -> None:
        self.tar.close()

    def copy_to(self, out: IO[bytes]) -> None:
        """The tar's bytes into `out` (which the build may then append to)."""
        self.tar.seek(0)
        shutil.copyfileobj(self.tar, out)
        out.seek(0)


def read_build_context(dev: DevContainer) -> BuildContext:
    """The dev container's build context, made into a private tar now and hashed.
    Raises ConfigError (too large, the Dockerfile outside the context) or
    ImageBuildError (the context changed while it was read)."""
    tar = tempfile.TemporaryFile()  # noqa: SIM115  (kept by the BuildContext it returns)
    try:
        dockerfile = _dockerfile_in_context(dev)
        _write_tar(dev, dockerfile, tar)
        digest, listing, named = _digest(dev, dockerfile, tar)
        if named is None:
            raise ConfigError(
                f"cannot read {dev.relative}'s Dockerfile: not a regular file (a FIFO, a "
                "device, a link or a directory); replace it with the file, or run with "
                "--no-devcontainer"
            )
    except BaseException:
        tar.close()
        raise
    return BuildContext(digest, dockerfile, named, tuple(listing), tar)


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
    dockerfile = _dockerfile_in_context(dev)
    _write_tar(dev, dockerfile, into)
    return _digest(dev, dockerfile, into)[0]


def _write_tar(dev: DevContainer, dockerfile: str, into: IO[bytes]) -> None:
    from docker.utils.build import exclude_paths

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
            with tarfile.open(mode="w", fileobj=into) as archive:
                for name in files:
                    _add_entry(archive, root, name, dev.context)
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
    size = into.seek(0, 2)
    if size > MAX_CONTEXT_BYTES:
        raise _too_large(dev, size)


def _digest(
    dev: DevContainer, dockerfile: str, made: IO[bytes]
) -> tuple[str, list[str], bytes | None]:
    """The tar's content hash (the tag's), one listing line per entry
    (`sha256:HEX`, `link:TARGET` or the entry's type, then its name), and the
    Dockerfile's bytes as the tar holds them (None: not a regular file there)."""
    made.seek(0)
    digest = hashlib.sha256(f"{RECIPE}\ndockerfile {dockerfile}\n".encode())
    digest.update(f"args {sorted(dev.args)}\ntarget {dev.target}\n".encode())
    listing: list[str] = []
    named: bytes | None = None
    with tarfile.open(fileobj=made, mode="r") as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            digest.update(
                f"{member.name}\0{member.type!r}\0{member.mode:o}\0{member.linkname}\0".encode()
            )
            if member.isfile():
                content = archive.extractfile(member)
                assert content is not None
                one = hashlib.sha256()
                keep = member.name == dockerfile
                if keep and member.size > MAX_DOCKERFILE_BYTES:
                    raise ConfigError(
                        f"{dev.relative}'s Dockerfile is larger than {MAX_DOCKERFILE_BYTES} "
                        "bytes; not read"
                    )
                named = b"" if keep else named
                while block := content.read(1 << 20):
                    digest.update(block)
                    one.update(block)
                    if keep:
                        named = (named or b"") + block
                shown = f"sha256:{one.hexdigest()}"
            elif member.issym():
                shown = f"link:{member.linkname}"
            else:
                shown = "directory" if member.isdir() else "other"
            listing.append(f"{shown} {member.mode:o} {member.name}")
    made.seek(0)
    return digest.hexdigest(), listing, named


def _too_large(dev: DevContainer, size: int) -> ConfigError:
    return ConfigError(
        f"{dev.relative}: the build context {dev.context} is {size} bytes or more, more "
        f"than {MAX_CONTEXT_BYTES}; add a .dockerignore or a smaller build.context"
    )


def _add_entry(archive: tarfile.TarFile, root: int, name: str, shown: Path) -> None:
    """Add the context's entry `name` as what was opened under `root`: a regular
    file's bytes from its own descriptor, a link as a link, a directory as one;
    sockets and device nodes are left out. OSError when it changed meanwhile."""
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
                archive.addfile(info, content)  # a file that shrank meanwhile: OSError
        elif stat.S_ISDIR(found.st_mode):
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        elif stat.S_ISLNK(found.st_mode):
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(base, dir_fd=at)
            archive.addfile(info)
        elif stat.S_ISFIFO(found.st_mode):
            info.type = tarfile.FIFOTYPE
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
