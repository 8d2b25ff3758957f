"""What each warden image is built from, and the content-addressed tags that follow.

A tag is `warden-<kind>:<hash12>`, where the hash covers every build input: the
Dockerfile, the files under `images/` it uses, the `sandbox_tools` source tree
(standard library only: no third-party package goes into an image), the build
recipe version and the base image id. The
same inputs always give the same tag, so an image that exists is never rebuilt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from orchestrator.shipped import shipped_root

RECIPE_VERSION = "2"
"""Bumped when the way a build context is assembled changes (it is a build input
that lives in Python code, not in a hashed file)."""

HASH_LENGTH = 12
"""Hex digits of the content hash used in tags."""

IGNORED_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".build"})
IGNORED_SUFFIXES = (".pyc", ".pyo")

COMMON_INPUTS = ("images/setup-image.sh", "sandbox_tools")
"""Repo-relative inputs every image is built from."""

# Labels on warden images (the `warden.` namespace is warden's own).
LABEL_CONTENT_HASH = "warden.content-hash"
LABEL_VERSION = "warden.version"
LABEL_KIND = "warden.image-kind"
LABEL_INPUTS_HASH = "warden.inputs-hash"
LABEL_BASE = "warden.base"
LABEL_BASE_ID = "warden.base-id"


@dataclass(frozen=True)
class ImageKind:
    """One of warden's images and what it needs from its base."""

    name: str
    dockerfile: str
    """Repo-relative Dockerfile."""
    inputs: tuple[str, ...]
    """Repo-relative files and directories besides COMMON_INPUTS and the Dockerfile."""
    required_tools: tuple[str, ...]
    """Commands the base image must already have (apt cannot run in offline builds)."""

    @property
    def repository(self) -> str:
        return f"warden-{self.name}"

    def all_inputs(self) -> tuple[str, ...]:
        return (self.dockerfile, *COMMON_INPUTS, *self.inputs)


MIN_PYTHON = (3, 9)
"""Oldest Python a base image may have (the runner's floor)."""

KINDS: dict[str, ImageKind] = {
    "agent": ImageKind(
        name="agent",
        dockerfile="Dockerfile.agent",
        inputs=(),
        required_tools=("bash", "git", "ps", "find", "xargs", "grep", "sed", "ls", "cat"),
    ),
    "bash": ImageKind(
        name="bash",
        dockerfile="images/bash/Dockerfile",
        inputs=("images/bash",),
        required_tools=("bash", "find", "xargs", "grep", "sed", "awk", "diff", "ls", "cat"),
    ),
    "runtime": ImageKind(
        name="runtime",
        dockerfile="images/runtime/Dockerfile",
        inputs=("images/runtime",),
        required_tools=("ldd",),
    ),
}
"""`runtime` is never run: it carries the Python that project images borrow
(`images.runtime`)."""


def _files(root: Path, relative: str) -> list[Path]:
    path = root / relative
    if path.is_file() or path.is_symlink():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"image build input {relative} is missing under {root}")
    found: list[Path] = []
    for child in sorted(path.iterdir()):
        if child.name in IGNORED_DIRS or child.name.endswith(IGNORED_SUFFIXES):
            continue
        found.extend(_files(root, str(child.relative_to(root))))
    return found


def input_files(kind: ImageKind, root: Path | None = None) -> list[Path]:
    """Every file that goes into the build context of `kind` (under `root`, by default
    the checkout's or the installed wheel's shipped files)."""
    root = root or shipped_root()
    files: dict[Path, None] = {}
    for relative in kind.all_inputs():
        for path in _files(root, relative):
            files[path] = None
    return sorted(files)


def inputs_hash(kind: ImageKind, root: Path | None = None) -> str:
    """sha256 over the kind's input files (paths, contents, exec bits), not the base.

    Modification times and `__pycache__` do not count; a renamed or edited file does.
    Paths count relative to `root`, so a wheel's copies hash as the checkout's do.
    """
    root = root or shipped_root()
    digest = hashlib.sha256()
    digest.update(f"warden-image recipe {RECIPE_VERSION} kind {kind.name}\n".encode())
    for path in input_files(kind, root):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            content = b"symlink:" + str(path.readlink()).encode()
        else:
            content = path.read_bytes()
        executable = path.stat().st_mode & 0o111 != 0 if not path.is_symlink() else False
        digest.update(f"{relative}\0{len(content)}\0{int(executable)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def content_hash(inputs: str, base_id: str) -> str:
    """The full content hash of an image: its inputs plus the exact base image."""
    return hashlib.sha256(f"inputs {inputs}\nbase {base_id}\n".encode()).hexdigest()


def content_tag(kind: ImageKind, inputs: str, base_id: str) -> str:
    """`warden-<kind>:<hash12>`."""
    return f"{kind.repository}:{content_hash(inputs, base_id)[:HASH_LENGTH]}"
