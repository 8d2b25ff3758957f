"""Which images a subagent can run in, checked before any sandbox starts.

warden brings the runner and its Python (`images.runtime`: its own interpreter,
C library and loader), so a project image needs neither Python nor glibc. What
it does need:

- Linux on the engine's architecture (`Os`, `Architecture` of the image): the
  runtime's binaries are built for this machine and nothing emulates another;
- `bash` on the image's PATH: the Bash tool runs `bash -c`, and the permission
  analyser proves commands as bash parses them (sh or busybox ash would parse
  some differently, so they are not a fallback).

Everything is read from the image's config and, for bash, from its file system
through a container that is created and never started (the engine's archive
stat, `HEAD /containers/{id}/archive`). The image's entrypoint is never run:
warden starts its own command directly.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.backend.classify import status_code
from orchestrator.errors import ImageNotFoundError, UnsupportedImageError
from orchestrator.labels import warden_labels
from sandbox_tools.wire import IMAGE_ENV_VARIABLE

if TYPE_CHECKING:
    from docker import DockerClient

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH the engine gives a container whose image sets none."""
KEPT_KEYS = frozenset({"PATH", "HOME"})
"""Image keys warden's own process keeps (`ProjectImage.sandbox_env`)."""
MAX_PATH_DIRS = 32
"""PATH entries searched for bash (an image's PATH is its author's input)."""
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
                 "s390x": "s390x", "riscv64": "riscv64", "i686": "386"}  # fmt: skip
"""`uname -m` names to the names images and engines use."""
IMAGE_FIX = (
    "use a Linux image built for {arch} with bash installed (Debian, Ubuntu, Fedora and "
    "the official language images have it; on Alpine add `RUN apk add bash`), or run "
    "this agent in warden's own image (`--image agent`)"
)


@dataclass(frozen=True)
class ProjectImage:
    """A project image that passed the checks, and what warden keeps of its config."""

    ref: str
    image_id: str
    bash: str
    """Where bash was found (on the image's PATH)."""
    user: str
    """The image's USER (informational: sandboxes run as the workspace owner)."""
    env: tuple[tuple[str, str], ...] = ()
    """The image's `ENV` (`Config.Env`), in its order."""

    def sandbox_env(self) -> dict[str, str]:
        """What warden adds to a sandbox's environment for this image: each of the
        image's keys empty (the engine cannot drop them), so nothing of the image's
        environment acts on warden's own process (the runner or the seal shim: its
        loader, interpreter and C library), and the image's values in
        `IMAGE_ENV_VARIABLE`, which that process puts back once sealed
        (`sandbox_tools.image_env`) for the commands it runs. PATH and HOME are not
        emptied: they only say where commands are found and where home is (warden
        sets HOME itself)."""
        values = dict(self.env)
        emptied = {key: "" for key in values if key not in KEPT_KEYS}
        return {**emptied, IMAGE_ENV_VARIABLE: json.dumps(values, separators=(",", ":"))}


def host_machine() -> str:
    """This machine's architecture, `uname -m` style."""
    return os.uname().machine


def check_project_image(
    client: DockerClient, ref: str, machine: str, *, need_bash: bool = True
) -> ProjectImage:
    """`ref` if a subagent (`need_bash`) or a plain command can run in it on this
    engine, else UnsupportedImageError naming the reason and the fix. `machine` is
    the runtime's architecture (`uname -m` style). ImageNotFoundError when the image
    is not present locally."""
    try:
        info = client.images.get(ref).attrs
    except Exception as exc:
        if status_code(exc) == 404:
            raise ImageNotFoundError(
                f"image {ref!r} does not exist locally (warden never pulls); build or load "
                "it first (`docker build`, `docker load`), or use --image agent"
            ) from exc
        raise
    arch = ARCHITECTURES.get(machine, machine)
    fix = IMAGE_FIX.format(arch=f"linux/{arch}")
    image_os = str(info.get("Os") or "")
    image_arch = str(info.get("Architecture") or "")
    if image_os != "linux":
        raise UnsupportedImageError(
            f"image {ref!r} is for {image_os or 'an unknown OS'}, not linux: warden cannot "
            f"run a subagent in it; {fix}"
        )
    if image_arch != arch:
        raise UnsupportedImageError(
            f"image {ref!r} is built for {image_arch or 'an unknown architecture'}, this "
            f"machine is {arch}: warden's runtime and the image's programs must match; {fix}"
        )
    config = info.get("Config") or {}
    user = str(config.get("User") or "")
    env = _env_pairs(config.get("Env") or [])
    if not need_bash:
        return ProjectImage(ref=ref, image_id=str(info["Id"]), bash="", user=user, env=env)
    path = _env_path(config.get("Env") or [])
    bash = _find_bash(client, ref, path)
    if bash is None:
        raise UnsupportedImageError(
            f"image {ref!r} has no bash on its PATH ({path}): warden's Bash tool runs "
            f"`bash -c`, and its permission rules are proven for bash; {fix}"
        )
    return ProjectImage(ref=ref, image_id=str(info["Id"]), bash=bash, user=user, env=env)


def _env_pairs(env: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for entry in env:
        key, _, value = str(entry).partition("=")
        if key and "\0" not in entry:
            pairs.append((key, value))
    return tuple(pairs)


def _env_path(env: list[str]) -> str:
    for entry in env:
        if entry.startswith("PATH="):
            return entry[len("PATH=") :]
    return DEFAULT_PATH


def _find_bash(client: DockerClient, ref: str, path: str) -> str | None:
    dirs = [d for d in path.split(":") if d.startswith("/")][:MAX_PATH_DIRS]
    session = f"images-check-{uuid.uuid4().hex[:8]}"
    created = client.api.create_container(
        ref, entrypoint=["/never-run"], command=[], network_disabled=True,
        labels=warden_labels(session, images="check"),
    )  # fmt: skip
    try:
        for directory in dirs:
            candidate = directory.rstrip("/") + "/bash"
            if _is_file(client, created["Id"], candidate):
                return candidate
        return None
    finally:
        client.api.remove_container(created["Id"], force=True)


def _is_file(client: DockerClient, container_id: str, path: str) -> bool:
    """Whether `path` exists in the container's file system and is not a directory.

    The SDK has no call for the archive stat alone (`get_archive` streams the file),
    so this sends the documented HEAD request on the SDK's own session."""
    url = client.api._url("/containers/{0}/archive", container_id)  # type: ignore[attr-defined]
    response = client.api.head(url, params={"path": path}, timeout=client.api.timeout)
    if response.status_code == 404:
        return False
    response.raise_for_status()
    header = response.headers.get("X-Docker-Container-Path-Stat", "")
    try:
        stat = json.loads(base64.b64decode(header))
    except (ValueError, binascii.Error):
        return False
    mode = int(stat.get("mode", 0))
    return not mode & (1 << 31)  # Go's os.ModeDir bit
