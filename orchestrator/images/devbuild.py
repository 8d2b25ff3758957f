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
  (honouring `.dockerignore`; `images.devcontext`); links in it stay links, never
  followed, and the classic builder has no RUN mounts;
- exactly what was trusted: a run makes the tar once, when it reads its policy
  inputs (`workspace.inputs`), trust binds to its hash, and the build sends that
  tar and checks that Dockerfile, never the workspace as it is by then;
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

import io
import json
import re
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, closing, nullcontext, suppress
from typing import IO, TYPE_CHECKING, Any

from orchestrator import __version__
from orchestrator.backend.contract import BuildLimits
from orchestrator.errors import ConfigError, ImageBuildError
from orchestrator.images.base_image import image_id
from orchestrator.images.buildbox import BuildBox, BuildEgress, BuildLimitError, layers_bytes
from orchestrator.images.buildfile import engine_dockerfile
from orchestrator.images.devcontainer import DevContainer
from orchestrator.images.devcontext import (
    BuildContext,
    _context_tar,  # noqa: F401  (tests make a context tar as a build would)
    read_build_context,
)
from orchestrator.images.hashing import HASH_LENGTH, LABEL_CONTENT_HASH, LABEL_KIND, LABEL_VERSION
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from docker import DockerClient

Log = Callable[[str], None]
EgressFactory = Callable[[], AbstractContextManager[BuildEgress | None]]
"""Starts the egress a build may use (None inside: the run grants none)."""

REPOSITORY = "warden-devcontainer"
LABEL_SOURCE = "warden.devcontainer"
ENGINE_DOCKERFILE = ".warden.Dockerfile"
"""Where warden's own Dockerfile for the engine goes in the context tar."""
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
    context: BuildContext | None = None,
) -> str:
    """The image the dev container runs: the image it names (which must exist
    locally; checked when it is resolved), or its Dockerfile built within `limits`
    (or found already built), with the network `egress` starts, if any; the build's
    holder carries `owner_labels`, so a crashed owner's is swept up. Raises
    ConfigError for a Dockerfile warden refuses to build, ImageBuildError when the
    build fails (BuildLimitError when it crossed a limit). `context`: the build
    context as read once (`images.devcontext`), whose hash names the image and whose
    tar, made only when there is no such image, is built only if it still has that
    hash (ImageBuildError otherwise); None: read now."""
    if dev.dockerfile is None:
        if dev.image is None:
            raise ConfigError(f"{dev.relative} names neither an image nor a Dockerfile")
        return dev.image
    made = read_build_context(dev) if context is None else context
    digest = made.digest
    tag = f"{REPOSITORY}:{digest[:HASH_LENGTH]}"
    if image_id(client, tag) is not None:
        log(f"dev container: {tag} is up to date (same files); not rebuilding")
        return tag
    with tempfile.TemporaryFile() as tar:
        made.copy_to(tar)  # the one tar: made now, sent only if it is what was read
        text = made.dockerfile_bytes
        engine = engine_dockerfile(
            client, text.decode(errors="replace"), dict(dev.args), dev.relative
        )
        for note in engine.notes:
            log(f"dev container: {note}")
        dockerfile = _add_engine_dockerfile(tar, engine.text)
        from orchestrator.images import resolve_image

        tar.seek(0)
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
            _build(client, box, dev, tar, dockerfile, tag, digest, log)
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
