"""Building a dev container's Dockerfile: offline, checked first, bounded,
cached by content hash.

The Dockerfile and its context come from the workspace, which subagents write,
so the build is treated as hostile input run on the host's engine:

- no network: every step runs in the network namespace of the build's holder
  (`images.buildbox`: only `lo`), unless the run's egress grants domains, and
  then only through warden's egress proxy with the run's rules; and the engine
  itself fetches nothing, because it builds a Dockerfile warden writes
  (`images.buildfile`: no `ADD`, no image name but local ids, no `ONBUILD`, no
  here-documents), appended to the context tar as `ENGINE_DOCKERFILE`;
- no host paths: the context is a tar warden makes of the context directory
  (honouring `.dockerignore`); links in it stay links, never followed, and the
  classic builder has no RUN mounts. The tar is warden's own (`_context_tar`),
  not the docker SDK's: the SDK checks a file's type by its path and then opens
  the path, so a sandbox of a concurrent run that swapped a file for a link in
  between would have a host file's bytes sent to the engine (and, with a COPY,
  into the image). Every entry is opened from its directory's descriptor with
  O_NOFOLLOW, from the workspace down, and described by what was opened;
- bounded (`BuildLimits`): the processes, memory and bytes written of all steps
  together, a total deadline, the context size (`MAX_CONTEXT_BYTES`). A build that crosses a
  limit fails with an error naming it and its variable, and leaves nothing: its
  step containers and the images its steps made are removed.
Build steps run as the engine runs them (root in the build container, default
capabilities); the image that comes out runs with warden's full hardening like
any other.

The tag is `warden-devcontainer:<hash12>` of the context's files (paths, modes,
link targets, contents), the Dockerfile path, build args and target, so a second
run with the same files builds nothing.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import posixpath
import re
import stat
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, closing, nullcontext, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from orchestrator import __version__
from orchestrator.backend.contract import BuildLimits
from orchestrator.backend.mounts import open_beneath, open_under
from orchestrator.errors import ConfigError, ImageBuildError, UnsafeMountError
from orchestrator.images.base_image import image_id
from orchestrator.images.buildbox import BuildBox, BuildEgress, BuildLimitError, layers_bytes
from orchestrator.images.buildfile import engine_dockerfile
from orchestrator.images.devcontainer import DevContainer, read_regular
from orchestrator.images.hashing import HASH_LENGTH, LABEL_CONTENT_HASH, LABEL_KIND, LABEL_VERSION
from orchestrator.regular_file import NotRegularFileError, open_regular
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from docker import DockerClient

Log = Callable[[str], None]
EgressFactory = Callable[[], AbstractContextManager[BuildEgress | None]]
"""Starts the egress a build may use (None inside: the run grants none)."""

REPOSITORY = "warden-devcontainer"
LABEL_SOURCE = "warden.devcontainer"
RECIPE = "devcontainer-build 2"
"""Part of the tag's hash: a change to how warden builds (2: the engine gets warden's
Dockerfile, `images.buildfile`) never reuses an image an older warden built."""
DOCKERIGNORE = ".dockerignore"
"""The build's ignore file, at the root of its context (read from the opened context)."""
ENGINE_DOCKERFILE = ".warden.Dockerfile"
"""Where warden's own Dockerfile for the engine goes in the context tar."""
MAX_CONTEXT_BYTES = 512 * 1024 * 1024
"""Largest build context (as a tar) sent to the engine."""
MAX_DOCKERFILE_BYTES = 1024 * 1024
"""Largest Dockerfile warden reads to check before a build."""
ERROR_CONTEXT_LINES = 30
LOG_LINE_CHARS = 300


def devcontainer_image(
    client: DockerClient,
    dev: DevContainer,
    log: Log,
    *,
    limits: BuildLimits | None = None,
    egress: EgressFactory | None = None,
    owner_labels: Mapping[str, str] | None = None,
) -> str:
    """The image the dev container runs: the image it names (which must exist
    locally; checked when it is resolved), or its Dockerfile built within `limits`
    (or found already built), with the network `egress` starts, if any; the build's
    holder carries `owner_labels`, so a crashed owner's is swept up. Raises
    ConfigError for a Dockerfile warden refuses to build, ImageBuildError when the
    build fails (BuildLimitError when it crossed a limit)."""
    if dev.dockerfile is None:
        if dev.image is None:
            raise ConfigError(f"{dev.relative} names neither an image nor a Dockerfile")
        return dev.image
    assert dev.context is not None
    with tempfile.TemporaryFile() as context:
        digest = _context_tar(dev, context)
        tag = f"{REPOSITORY}:{digest[:HASH_LENGTH]}"
        if image_id(client, tag) is not None:
            log(f"dev container: {tag} is up to date (same files); not rebuilding")
            return tag
        text = read_regular(dev.dockerfile, f"{dev.relative}'s Dockerfile", MAX_DOCKERFILE_BYTES)
        if len(text) > MAX_DOCKERFILE_BYTES:
            raise ConfigError(
                f"{dev.relative}'s Dockerfile is larger than {MAX_DOCKERFILE_BYTES} bytes; not read"
            )
        engine = engine_dockerfile(
            client, text.decode(errors="replace"), dict(dev.args), dev.relative
        )
        for note in engine.notes:
            log(f"dev container: {note}")
        dockerfile = _add_engine_dockerfile(context, engine.text)
        from orchestrator.images import resolve_image

        context.seek(0)
        with (egress or nullcontext)() as network:
            where = "egress through warden's proxy" if network else "no network"
            log(f"dev container: building {tag} from {dev.relative} ({where})")
            box = BuildBox(
                client,
                limits or BuildLimits(),
                holder_image=resolve_image(client, "bash"),
                egress=network,
                labels=owner_labels,
            )
            _build(client, box, dev, context, dockerfile, tag, digest, log)
    return tag


def _add_engine_dockerfile(context: IO[bytes], text: str) -> str:
    """Append warden's Dockerfile (`images.buildfile`) to the context tar under a
    name no context entry has; that name, for the build's `dockerfile`."""
    context.seek(0)
    with tarfile.open(fileobj=context, mode="r") as archive:
        names = set(archive.getnames())
    name = ENGINE_DOCKERFILE
    while name in names:
        name = f"_{name}"
    data = text.encode()
    context.seek(0)
    with tarfile.open(fileobj=context, mode="a") as archive:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        archive.addfile(info, io.BytesIO(data))
    return name


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
    from docker.utils.build import exclude_paths

    assert dev.context is not None
    dockerfile = _dockerfile_in_context(dev)
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
    made = into
    size = made.seek(0, 2)
    if size > MAX_CONTEXT_BYTES:
        raise _too_large(dev, size)
    made.seek(0)
    digest = hashlib.sha256(f"{RECIPE}\ndockerfile {dockerfile}\n".encode())
    digest.update(f"args {sorted(dev.args)}\ntarget {dev.target}\n".encode())
    with tarfile.open(fileobj=made, mode="r") as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            digest.update(
                f"{member.name}\0{member.type!r}\0{member.mode:o}\0{member.linkname}\0".encode()
            )
            if member.isfile():
                content = archive.extractfile(member)
                assert content is not None
                while block := content.read(1 << 20):
                    digest.update(block)
    made.seek(0)
    return digest.hexdigest()


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


def _build(
    client: DockerClient,
    box: BuildBox,
    dev: DevContainer,
    context: IO[bytes],
    dockerfile: str,
    tag: str,
    digest: str,
    log: Log,
) -> None:
    params: dict[str, Any] = {
        "t": tag,
        "dockerfile": dockerfile,
        "buildargs": dict(dev.args),
        "labels": json.dumps({
            LABEL_KIND: "devcontainer",
            LABEL_CONTENT_HASH: digest,
            LABEL_VERSION: __version__,
            LABEL_SOURCE: dev.relative,
        }),
        "pull": False,
        "version": "1",  # the classic builder: no BuildKit frontend, no `# syntax` image
        "rm": True,
        "forcerm": True,
    }  # fmt: skip
    if dev.target:
        params["target"] = dev.target
    output = BuildOutput(log, tag)
    failure: str | None = None
    with box:
        try:
            with closing(box.build(context, params)) as stream:  # its watchdog ends here
                for chunk in stream:
                    if "error" in chunk:
                        failure = printable(str(chunk["error"]), LOG_LINE_CHARS)
                        break
                    output.add(str(chunk.get("stream", "")))
            crossed = box.crossed or box.pids_reached()
            if crossed is None:  # what the build's step images hold, however fast
                crossed = box.disk_reached(failure, layers_bytes(client, output.created))
            if crossed is None and failure is not None:
                crossed = box.memory_reached()
        except BaseException:
            _remove_images(client, output, tag)
            raise
    if crossed is not None or failure is not None:
        _remove_images(client, output, tag)
    if crossed is not None:
        raise BuildLimitError(
            f"building the dev container {dev.relative} stopped: {crossed}\nlast build "
            "output:\n" + "\n".join(output.recent) + "\nnothing of the build was kept; "
            "or run with --no-devcontainer"
        )
    if failure is not None and "can't be a URL" in failure:
        failure += (
            " (dev container builds never download: `ADD` is built as `COPY`, so a source "
            "that expands to a URL fails; put the file in the build context)"
        )
    if failure is not None:
        raise ImageBuildError(
            f"building the dev container {dev.relative} failed: {failure}\nlast build "
            "output:\n" + "\n".join(output.recent) + "\nfix its Dockerfile, or run with "
            "--no-devcontainer"
        )
    if image_id(client, tag) is None:
        raise ImageBuildError(
            f"the engine reported no error but {tag} does not exist; last build output:\n"
            + "\n".join(output.recent)
        )


class BuildOutput:
    """The classic builder's output: shown (plain text), its last lines kept for an
    error, and the ids of the images this build's steps made (not the base images
    of `FROM`, not cache hits), so a failed build can remove them."""

    def __init__(self, log: Log, tag: str = "") -> None:
        self.log = log
        self.recent: deque[str] = deque(maxlen=ERROR_CONTEXT_LINES)
        self.created: list[str] = []
        self._tagged_line = f"Successfully tagged {tag}" if tag else None
        self.tagged = False
        """The engine said it tagged the image as `tag` (the build's last act). A
        step's own output is in the same stream: to fake this line it would have to
        compute `tag` (a hash of the whole context) inside the build."""
        self._step = ""
        self._cached = False

    def add(self, text: str) -> None:
        for line in _COLOURS.sub("", text).splitlines():
            if not line.strip():
                continue
            shown = printable(line.rstrip(), LOG_LINE_CHARS)
            self.recent.append(shown)
            self.log(f"  {shown}")
            if line.strip() == self._tagged_line:
                self.tagged = True
            elif _STEP.match(line):
                self._step, self._cached = line, False
            elif line.strip() == "---> Using cache":
                self._cached = True
            elif (made := _RESULT.match(line)) and not (
                self._cached or _FROM_STEP.match(self._step)
            ):
                self.created.append(made.group(1))


_COLOURS = re.compile("\x1b\\[(?:91|0)m")
"""The classic builder's red around a step's stderr."""
_STEP = re.compile(r"^Step \d+/\d+ : ")
_FROM_STEP = re.compile(r"^Step \d+/\d+ : FROM\s", re.IGNORECASE)
_RESULT = re.compile(r"^ ---> ([0-9a-f]{12,64})$")


def _remove_images(client: DockerClient, output: BuildOutput, tag: str) -> None:
    """Remove what a failed build made: its tag, only when this build got as far as
    making it, and its steps' images that no tag names, newest first (each is the
    parent of the next). Another process may build the same dev container at the
    same time: the tag, and an image it names, are then that build's, in use."""
    from docker.errors import APIError

    for ref in [tag] if output.tagged else []:
        with suppress(APIError):  # already gone
            client.images.remove(ref, noprune=True)
    for ref in reversed(output.created):
        with suppress(APIError):  # gone, or the parent of another build's image
            if not client.images.get(ref).tags:
                client.images.remove(ref, noprune=True)
