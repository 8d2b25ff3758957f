"""warden's sandbox images: offline, content-addressed builds and fast lookup.

Public API:
- `resolve_image(client, name)`: the tag to run for "agent", "bash" or any local image.
- `build_images(client, settings, *, force=False, log)`: build what is missing.
- `image_status(client)`: per kind, whether a current image exists (for `warden doctor`).
- `current_tag(client, kind, state_dir)`: the current tag of one of warden's kinds
  (`hints`: the tag found last time, confirmed by one inspect).
- `remembered_image(kind, state_dir)`: the id that lookup last confirmed, with no engine
  call (`warden exec`; a 404 at create sends it back to `current_tag`).
- `choice.SandboxImages`: image names to what a sandbox runs (project images too).
- `sealing.sealed_program(tail)`: a hook shim under the fallocate filter.

May import: `errors`, `labels`, `values`, `shipped` (the build inputs), `backend`, `untrusted_text` (build output of a dev
container is shown as plain text), `owner` (the owner labels of a build's
probe container).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, TypeVar

from orchestrator.backend.classify import is_connection_error, status_code
from orchestrator.backend.connect import ENGINE_FIX
from orchestrator.errors import EngineUnavailableError, ImageNotFoundError
from orchestrator.images import hints
from orchestrator.images.hashing import (
    KINDS,
    LABEL_BASE,
    LABEL_BASE_ID,
    LABEL_INPUTS_HASH,
    LABEL_KIND,
    ImageKind,
    inputs_hash,
)

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestrator.config import Settings

T = TypeVar("T")

__all__ = ["KINDS", "ImageState", "build_images", "current_tag", "image_status", "resolve_image"]

BUILD_HINT = "run `warden images build`"


def resolve_image(client: DockerClient, name: str, state_dir: Path | None = None) -> str:
    """The image reference to run for `name`.

    "agent" / "bash": the content-addressed tag of the image built from the current
    sources. Anything else: `name` itself, when that image exists locally (no registry
    is ever consulted). Hashes a few small files and makes one engine call.

    Raises ImageNotFoundError (with the command that fixes it) when there is no such
    image, EngineUnavailableError when the engine does not answer. With `state_dir`,
    the tag found last time is tried first (`hints`).
    """
    if name in KINDS:
        return current_tag(client, name, state_dir)
    if _image_id(client, name) is None:
        raise ImageNotFoundError(
            f"image {name!r} does not exist locally (warden never pulls); load or build it "
            f"first, or use --image agent / --image bash ({BUILD_HINT} to build those)"
        )
    return name


def current_tag(client: DockerClient, kind: str, state_dir: Path | None = None) -> str:
    """The content tag of warden's image `kind` built from the current sources.
    With `state_dir`, the tag found last time is tried first and the one found is kept
    there (`hints`: one inspect instead of a listing of every image).
    Raises ImageNotFoundError naming the build command when there is none."""
    image_kind = KINDS[kind]
    inputs = inputs_hash(image_kind)
    if state_dir is not None:
        tag = hints.hinted_tag(client, image_kind, inputs, state_dir)
        if tag is not None:
            return tag
    found = _current(client, image_kind, inputs)
    if found is None:
        raise ImageNotFoundError(
            f"the warden {kind} image is not built for the current sources; {BUILD_HINT}"
        )
    if state_dir is not None:
        hints.remember(state_dir, image_kind, inputs, found[0], found[1].get("Id"))
    return found[0]


def remembered_image(kind: str, state_dir: Path) -> str | None:
    """The id of warden's image `kind` at the current sources, as a lookup in this state
    directory last confirmed it, without asking the engine; None when there is no such
    hint. The image may have been removed since: a create then fails with
    ImageNotFoundError, and `current_tag` looks it up again (`warden exec` does)."""
    image_kind = KINDS[kind]
    return hints.hinted_id(image_kind, inputs_hash(image_kind), state_dir)


def build_images(
    client: DockerClient,
    settings: Settings,
    *,
    force: bool = False,
    log: Callable[[str], None],
    pull: bool = True,
) -> dict[str, str]:
    """Build every warden image whose content tag is missing; kind -> tag (see
    `images.build.build_images`). The build machinery is imported only here, so
    resolving an image (every `warden exec`) does not load it."""
    from orchestrator.images.build import build_images as build

    return build(client, settings, force=force, log=log, pull=pull)


@dataclass(frozen=True)
class ImageState:
    """What `warden doctor` reports about one of warden's images."""

    kind: str
    state: Literal["current", "stale", "missing"]
    tag: str | None
    """The current tag (state "current"), else the newest older image of this kind."""
    detail: str


def image_status(client: DockerClient) -> list[ImageState]:
    """Per kind: built from the current sources (and an unchanged base), or not."""
    states = []
    for kind in KINDS.values():
        found = _current(client, kind)
        if found is not None:
            tag, row = found
            labels = row.get("Labels") or {}
            base, base_id = labels.get(LABEL_BASE, ""), labels.get(LABEL_BASE_ID, "")
            if _image_id(client, base) == base_id:
                states.append(ImageState(kind.name, "current", tag, f"built FROM {base}"))
            else:
                detail = f"its base {base} changed or is gone; {BUILD_HINT}"
                states.append(ImageState(kind.name, "stale", tag, detail))
            continue
        older = _rows(client, {"label": [f"{LABEL_KIND}={kind.name}"]})
        if older:
            detail = f"sources changed since it was built; {BUILD_HINT}"
            states.append(ImageState(kind.name, "stale", _tag_of(kind, older[0]), detail))
        else:
            states.append(ImageState(kind.name, "missing", None, f"not built; {BUILD_HINT}"))
    return states


class _ImageRow(TypedDict, total=False):
    """One row of the engine's image list (`GET /images/json`), the fields read here."""

    Id: str
    Created: int
    RepoTags: list[str] | None
    Labels: dict[str, str] | None


def _current(
    client: DockerClient, kind: ImageKind, inputs: str | None = None
) -> tuple[str, _ImageRow] | None:
    inputs = inputs_hash(kind) if inputs is None else inputs
    filters = {"label": [f"{LABEL_KIND}={kind.name}", f"{LABEL_INPUTS_HASH}={inputs}"]}
    for row in _rows(client, filters):
        tag = _tag_of(kind, row)
        if tag is not None:
            return tag, row
    return None


def _rows(client: DockerClient, filters: dict[str, list[str]]) -> list[_ImageRow]:
    rows: list[_ImageRow] = _call(lambda: client.api.images(filters=filters))
    return sorted(rows, key=lambda row: int(row.get("Created", 0)), reverse=True)


def _tag_of(kind: ImageKind, row: _ImageRow) -> str | None:
    for tag in row.get("RepoTags") or []:
        if str(tag).startswith(kind.repository + ":"):
            return str(tag)
    return None


def _image_id(client: DockerClient, ref: str) -> str | None:
    try:
        return _call(lambda: client.images.get(ref).id)
    except Exception as exc:
        if status_code(exc) == 404:
            return None
        raise


def _call(call: Callable[[], T]) -> T:
    """One engine call; a dead engine becomes EngineUnavailableError."""
    try:
        return call()
    except Exception as exc:
        if is_connection_error(exc):
            raise EngineUnavailableError(
                f"the Docker engine does not answer; {ENGINE_FIX}"
            ) from exc
        raise
