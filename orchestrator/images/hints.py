"""The tag last found for each of warden's image kinds, so the next lookup asks the
engine about one image instead of listing them all.

Listing images by label (`GET /images/json?filters=...`) makes the engine read every
image's config: ~50 ms with 46 images here, more on a machine with hundreds, paid by
every `warden exec` and `warden run`. Inspecting one image by its tag takes ~2 ms.
So the tag a lookup (or a build) settled on is kept in the state directory beside
the inputs hash it was found for, and the next lookup inspects that tag: it is used
only when the engine says the image exists and carries the same kind and inputs
hash labels (the labels the listing filters on). Anything else (no file, another
hash, the image removed or re-tagged, an unreadable file) falls back to the listing.

A hint also keeps the image id the engine confirmed. `warden exec` runs that id
without asking the engine first (`hinted_id`): an id names content, so a re-tag
cannot swap it, and an image that is gone fails the create (404), after which exec
looks the image up again. That saves exec a round trip on every start.

The file is a hint and never an authority: it lives in the user's state directory
(which no workspace may contain), and whatever it names is checked by the engine.
One difference from the listing: when two images have the same inputs (built from
different bases), the listing takes the newest while a hint keeps the one it named
until a build in this state directory (which writes the hint) or its removal.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.images.hashing import LABEL_INPUTS_HASH, LABEL_KIND, ImageKind

if TYPE_CHECKING:
    from docker import DockerClient

HINTS_FILE = "image-tags.json"
MAX_HINTS_BYTES = 64 * 1024
"""A larger file is not read (the hint is then ignored)."""


def _path(state_dir: Path) -> Path:
    return state_dir / HINTS_FILE


def _read(state_dir: Path) -> dict[str, dict[str, str]]:
    try:
        with _path(state_dir).open("rb") as handle:
            raw = handle.read(MAX_HINTS_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_HINTS_BYTES else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        kind: entry
        for kind, entry in data.items()
        if isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values())
    }


def hinted_tag(client: DockerClient, kind: ImageKind, inputs: str, state_dir: Path) -> str | None:
    """The hinted tag for `kind` built from `inputs`, if the engine confirms it."""
    entry = _read(state_dir).get(kind.name)
    if entry is None or entry.get("inputs") != inputs or "tag" not in entry:
        return None
    tag = entry["tag"]
    if not tag.startswith(kind.repository + ":"):
        return None
    try:
        image = client.images.get(tag)
        labels = image.labels or {}
    except Exception:  # gone, or the engine failed: the listing decides (and reports)
        return None
    if labels.get(LABEL_KIND) != kind.name or labels.get(LABEL_INPUTS_HASH) != inputs:
        return None
    if image.id and entry.get("id") != image.id:
        remember(state_dir, kind, inputs, tag, image.id)
    return tag


def hinted_id(kind: ImageKind, inputs: str, state_dir: Path) -> str | None:
    """The image id last confirmed for `kind` built from `inputs`, without asking the
    engine (it may have been removed since: the caller handles the create's 404)."""
    entry = _read(state_dir).get(kind.name)
    if entry is None or entry.get("inputs") != inputs:
        return None
    found = entry.get("id", "")
    digest = found.removeprefix("sha256:")
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        return None
    return found


def remember(
    state_dir: Path, kind: ImageKind, inputs: str, tag: str, image_id: str | None = None
) -> None:
    """Keep `tag` (and the id of the image it names) as the hint for `kind` at `inputs`.
    Best effort: a hint that cannot be written only costs the next lookup a listing."""
    hints = _read(state_dir)
    entry = {"inputs": inputs, "tag": tag, **({"id": image_id} if image_id else {})}
    if hints.get(kind.name) == entry:
        return
    hints[kind.name] = entry
    path = _path(state_dir)
    temp = path.with_name(f".{HINTS_FILE}.{os.getpid()}.tmp")
    if not state_dir.is_dir():  # made (with its permissions) by whoever owns it, not here
        return
    with contextlib.suppress(OSError):
        temp.write_text(json.dumps(hints, sort_keys=True))
        os.replace(temp, path)
    with contextlib.suppress(OSError):
        temp.unlink(missing_ok=True)
