"""`warden images build`: content-addressed, offline builds of warden's images."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import __version__
from orchestrator.errors import ImageBuildError
from orchestrator.images import hints
from orchestrator.images.base_image import BaseImage, BaseResolver, image_id
from orchestrator.images.hashing import (
    KINDS,
    LABEL_BASE,
    LABEL_BASE_ID,
    LABEL_CONTENT_HASH,
    LABEL_INPUTS_HASH,
    LABEL_KIND,
    LABEL_VERSION,
    ImageKind,
    content_hash,
    content_tag,
    input_files,
    inputs_hash,
)
from orchestrator.shipped import shipped_root

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestrator.config import Settings

Log = Callable[[str], None]

BUILD_TIMEOUT_S = 1800
"""Longest silence tolerated from the engine during one build."""
ERROR_CONTEXT_LINES = 30
"""Build output lines attached to a build error."""

_STEP = re.compile(r"^Step \d+/\d+ : ")
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})$")


def build_images(
    client: DockerClient,
    settings: Settings,
    *,
    force: bool = False,
    log: Callable[[str], None],
    pull: bool = True,
) -> dict[str, str]:
    """Build every warden image whose content tag is missing; kind -> tag.

    `force` rebuilds even when the tag exists. `pull=False` never asks a registry
    for the base. Raises ImageBuildError saying what failed and what to do.
    """
    from orchestrator import owner

    shipped_root()  # an installation without the build inputs fails here, naming the fix
    _remove_leftovers(client, log)
    kinds = list(KINDS.values())
    resolver = BaseResolver(
        client,
        settings.base_image,
        log,
        pull=pull,
        owner_labels=owner.current(settings.state_dir).labels(),
    )
    bases = resolver.for_kinds(kinds)
    tags: dict[str, str] = {}
    for kind in kinds:
        base = bases[kind.name]
        ihash = inputs_hash(kind)
        tag = content_tag(kind, ihash, base.image_id)
        tags[kind.name] = tag
        existing = image_id(client, tag)
        if existing is not None and not force:
            log(f"{kind.name}: {tag} is up to date (same inputs, same base); not rebuilding")
            hints.remember(settings.state_dir, kind, ihash, tag, existing)
            continue
        why = "--force" if existing is not None else "no image has these inputs yet"
        log(f"{kind.name}: building {tag} FROM {base.ref} ({base.origin}; {why})")
        started = time.monotonic()
        _build_one(client, kind, base, ihash, tag, log, nocache=force)
        if existing is not None and existing != image_id(client, tag):
            _remove_quietly(client, existing)  # the --force rebuild replaced our old image
        log(f"{kind.name}: built {tag} in {time.monotonic() - started:.1f} s")
        hints.remember(settings.state_dir, kind, ihash, tag, image_id(client, tag))
    return tags


def _assemble_context(kind: ImageKind, into: Path) -> None:
    """Exactly the hashed inputs, at their repo paths, plus the Dockerfile."""
    root = shipped_root()
    for path in input_files(kind, root):
        target = into / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)
    shutil.copy2(root / kind.dockerfile, into / "Dockerfile")


CONTEXT_PREFIX = "warden-{kind}-context-{pid}-"
"""Build contexts in the temp dir carry the building process's pid, so a later build
can remove those a killed build left (`_remove_leftovers`)."""
_CONTEXT_PATTERN = re.compile(r"^warden-[a-z0-9-]+?-context-(\d+)-")


def _remove_leftovers(client: DockerClient, log: Log) -> None:
    """What a build killed midway (SIGKILL) left: probe containers whose owner is dead
    and build contexts whose process is gone."""
    from orchestrator import owner
    from orchestrator.labels import NAMESPACE

    for container in client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{NAMESPACE}images"}
    ):
        identity = owner.Owner.from_labels(dict(container.labels))
        if identity is not None and owner.is_dead(identity):
            with contextlib.suppress(Exception):
                container.remove(force=True)
                log(f"removed probe container {container.short_id} of a build that died")
    for path in Path(tempfile.gettempdir()).glob("warden-*-context-*"):
        match = _CONTEXT_PATTERN.match(path.name)
        if match and path.is_dir() and not owner.pid_alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            log(f"removed the build context {path} of a build that died")


def _build_one(
    client: DockerClient,
    kind: ImageKind,
    base: BaseImage,
    ihash: str,
    tag: str,
    log: Log,
    *,
    nocache: bool,
) -> None:
    labels = {
        LABEL_CONTENT_HASH: content_hash(ihash, base.image_id),
        LABEL_VERSION: __version__,
        LABEL_KIND: kind.name,
        LABEL_INPUTS_HASH: ihash,
        LABEL_BASE: base.ref,
        LABEL_BASE_ID: base.image_id,
    }
    recent: deque[str] = deque(maxlen=ERROR_CONTEXT_LINES)
    stage_images: list[str] = []
    last_layer: str | None = None
    prefix = CONTEXT_PREFIX.format(kind=kind.name, pid=os.getpid())
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        context = Path(tmp)
        _assemble_context(kind, context)
        stream = client.api.build(
            path=str(context),
            dockerfile="Dockerfile",
            tag=tag,
            buildargs={"BASE": base.ref},
            labels=labels,
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
            nocache=nocache,
            decode=True,
            timeout=BUILD_TIMEOUT_S,
        )
        for chunk in stream:
            if "error" in chunk:
                recent.append(str(chunk["error"]))
                raise ImageBuildError(
                    f"building {tag} failed: {chunk['error']}\nlast build output:\n"
                    + "\n".join(recent)
                )
            for line in str(chunk.get("stream", "")).splitlines():
                line = line.rstrip()
                if not line:
                    continue
                recent.append(line)
                layer = _LAYER.match(line)
                if layer:
                    last_layer = layer.group(1)
                if _STEP.match(line):
                    if "FROM scratch" in line and last_layer is not None:
                        stage_images.append(last_layer)  # the finished build stage
                    log(f"  {line}")
    if image_id(client, tag) is None:
        raise ImageBuildError(
            f"the engine reported no error but {tag} does not exist; last build output:\n"
            + "\n".join(recent)
        )
    for stage in stage_images:
        # The build stage (untagged) holds what the flattening left out; it is ours.
        _remove_quietly(client, stage)


def _remove_quietly(client: DockerClient, image: str) -> None:
    from docker.errors import APIError

    with contextlib.suppress(APIError):  # still used by another image or build: leave it
        client.api.remove_image(image, force=False, noprune=False)
