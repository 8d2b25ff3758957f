"""The workspace's dev container (`.devcontainer/devcontainer.json` or
`.devcontainer.json`): which image it names or builds, and what of it warden
will not apply.

devcontainer.json is JSONC (comments, trailing commas). It is read with `json5`,
a maintained JSON5 parser (JSONC is a subset of JSON5), with duplicate keys
refused: a second `"image"` must not quietly replace the first.

The workspace is container output: a subagent of an earlier run may have written
this file. So it is read confined to the workspace (no symbolic link on the way),
size-capped, and only `image`, `build.dockerfile` (or the older `dockerFile`),
`build.context`, `build.args` and `build.target` are used. Every key that would
change the sandbox (`privileged`, `capAdd`, `runArgs`, host `mounts`,
`forwardPorts`, lifecycle commands such as `initializeCommand`, which would run on
the host, ...) is ignored with one warning each, never applied. Building its
Dockerfile is `images.devbuild`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator import regular_file
from orchestrator.backend.mounts import check_confined
from orchestrator.errors import ConfigError, UnsafeMountError
from orchestrator.untrusted_text import printable

CONFIG_PATHS = (".devcontainer/devcontainer.json", ".devcontainer.json")
"""Where a dev container is looked for, in this order (as the dev container CLI)."""
MAX_CONFIG_BYTES = 256 * 1024
"""Largest devcontainer.json read."""
KEY_CHARS = 60
"""Longest unknown key shown in a warning (it is workspace text: shown inert)."""

NOT_APPLIED: dict[str, str] = {
    "privileged": "a warden sandbox never runs privileged",
    "capAdd": "a warden sandbox has no capabilities",
    "securityOpt": "a warden sandbox keeps its own security options (no-new-privileges)",
    "runArgs": "docker run arguments could undo the sandbox",
    "mounts": "a sandbox mounts only the workspace and warden's own read-only paths",
    "workspaceMount": "the workspace is always mounted at /workspace",
    "workspaceFolder": "the workspace is always mounted at /workspace",
    "forwardPorts": "a sandbox has no network but loopback",
    "appPort": "a sandbox has no network but loopback",
    "portsAttributes": "a sandbox has no network but loopback",
    "otherPortsAttributes": "a sandbox has no network but loopback",
    "init": "warden always runs an init",
    "containerUser": "sandboxes run as the workspace owner, never root",
    "remoteUser": "sandboxes run as the workspace owner, never root",
    "updateRemoteUserUID": "sandboxes run as the workspace owner, never root",
    "userEnvProbe": "nothing is probed in a sandbox",
    "containerEnv": "not applied; set ENV in the Dockerfile instead",
    "remoteEnv": "not applied; set ENV in the Dockerfile instead",
    "features": "features are downloaded, and builds have no network",
    "overrideFeatureInstallOrder": "features are downloaded, and builds have no network",
    "initializeCommand": "it would run on the host; warden never runs workspace commands there",
    "onCreateCommand": "lifecycle commands are not run; the subagent runs what it is asked",
    "updateContentCommand": "lifecycle commands are not run; the subagent runs what it is asked",
    "postCreateCommand": "lifecycle commands are not run; the subagent runs what it is asked",
    "postStartCommand": "lifecycle commands are not run; the subagent runs what it is asked",
    "postAttachCommand": "lifecycle commands are not run; the subagent runs what it is asked",
    "waitFor": "lifecycle commands are not run",
    "hostRequirements": "warden's own limits apply (memory, CPU, pids, disk)",
    "shutdownAction": "warden removes every sandbox when its task ends",
    "overrideCommand": "warden runs its own command, never the image's",
    "dockerComposeFile": "Docker Compose is not supported; name an image or a Dockerfile",
    "service": "Docker Compose is not supported",
    "runServices": "Docker Compose is not supported",
}
"""Keys warden reads and does not apply, each with why (one warning each)."""
NOT_APPLIED_BUILD: dict[str, str] = {
    "options": "docker build options could give the build network or host access",
    "cacheFrom": "builds use only the local cache",
}
SILENT_KEYS = frozenset({"$schema", "name", "customizations", "image", "build", "dockerFile",
                         "context"})  # fmt: skip
"""Keys used, or harmless to ignore (editor settings)."""
BUILD_KEYS = frozenset({"dockerfile", "context", "args", "target"})


@dataclass(frozen=True)
class DevContainer:
    """What warden uses of a devcontainer.json."""

    config: Path
    """The devcontainer.json (host path)."""
    relative: str
    """Its path in the workspace, for messages."""
    image: str | None = None
    """`image`, when the file names one."""
    dockerfile: Path | None = None
    """`build.dockerfile`, resolved on the host (inside the workspace)."""
    context: Path | None = None
    """`build.context`, resolved (default: the devcontainer.json's directory)."""
    workspace: Path | None = None
    """The workspace (resolved) `dockerfile` and `context` were confined to."""
    args: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    warnings: tuple[str, ...] = ()
    """One line per key not applied."""


def find_devcontainer(workspace: Path) -> DevContainer | None:
    """The workspace's dev container, or None when it has no devcontainer.json.
    Raises ConfigError naming the file and the fix when it cannot be read or parsed."""
    root = workspace.resolve()
    for relative in CONFIG_PATHS:
        path = root / relative
        if os.path.lexists(path):
            return parse_devcontainer(root, path, relative)
    return None


def parse_devcontainer(
    workspace: Path, path: Path, relative: str, *, raw: bytes | None = None
) -> DevContainer:
    """Read and check one devcontainer.json (see the module doc); `raw`: its bytes
    as already read (`images.devcontext`), so what is used is what was hashed."""
    import json5

    text = _decode(read_config(workspace, path, relative) if raw is None else raw, relative)
    try:
        doc = json5.loads(text, allow_duplicate_keys=False)
    except ValueError as exc:
        raise ConfigError(
            f"{relative} is not valid JSON with comments: {exc}; fix it, or run with "
            "--no-devcontainer"
        ) from exc
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{relative} must hold a JSON object; fix it, or run with --no-devcontainer"
        )
    warnings: list[str] = []
    for key in doc:
        if key in NOT_APPLIED:
            warnings.append(f"{relative}: `{key}` is not applied: {NOT_APPLIED[key]}")
        elif key not in SILENT_KEYS:
            warnings.append(f"{relative}: `{printable(key, KEY_CHARS)}` is not used by warden")
    base = path.parent
    image = _text(doc, "image", relative)
    build = doc.get("build") or {}
    if not isinstance(build, dict):
        raise ConfigError(f"{relative}: `build` must be an object")
    for key in build:
        if key in NOT_APPLIED_BUILD:
            warnings.append(f"{relative}: `build.{key}` is not applied: {NOT_APPLIED_BUILD[key]}")
        elif key not in BUILD_KEYS:
            shown = printable(key, KEY_CHARS)
            warnings.append(f"{relative}: `build.{shown}` is not used by warden")
    dockerfile_name = _text(build, "dockerfile", relative) or _text(doc, "dockerFile", relative)
    context_name = _text(build, "context", relative) or _text(doc, "context", relative) or "."
    if image is not None and dockerfile_name is not None:
        warnings.append(
            f"{relative}: both `image` and a Dockerfile are set; the Dockerfile is built"
        )
    if dockerfile_name is None:
        if image is None:
            warnings.append(f"{relative}: names neither `image` nor `build.dockerfile`; not used")
        return DevContainer(path, relative, image=image, warnings=tuple(warnings))
    dockerfile = _inside(workspace, base / dockerfile_name, relative, "build.dockerfile")
    context = _inside(workspace, base / context_name, relative, "build.context")
    args = build.get("args") or {}
    if not isinstance(args, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in args.items()
    ):
        raise ConfigError(f"{relative}: `build.args` must map names to strings")
    return DevContainer(
        path, relative, dockerfile=dockerfile, context=context, workspace=workspace,
        args=tuple(sorted(args.items())), target=_text(build, "target", relative),
        warnings=tuple(warnings),
    )  # fmt: skip


def read_config(workspace: Path, path: Path, relative: str) -> bytes:
    """The bytes of a devcontainer.json, read confined to the workspace (no link on
    the way), size-capped. ConfigError naming the fix otherwise."""
    try:
        expected = check_confined(workspace, path)
    except UnsafeMountError as exc:
        raise ConfigError(
            f"cannot read {relative}: {exc}; a dev container file must be a regular file "
            "inside the workspace (or run with --no-devcontainer)"
        ) from exc
    data = read_regular(path, relative, MAX_CONFIG_BYTES, expected=expected)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{relative} is larger than {MAX_CONFIG_BYTES} bytes; not read")
    return data


def _decode(data: bytes, relative: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{relative} is not UTF-8 text: {exc}") from exc


def read_regular(
    path: Path,
    relative: str,
    max_bytes: int,
    *,
    expected: os.stat_result | None = None,
    dir_fd: int | None = None,
) -> bytes:
    """At most `max_bytes + 1` bytes of `path` (relative to the directory `dir_fd` when
    given), which must be a regular file (and, given `expected`, that very file).
    Opened without following a link and non-blocking: a FIFO a sandbox left in its
    place would otherwise hold the open (and the run's event loop) until something
    writes to it, for good. ConfigError naming the fix otherwise."""
    try:
        return regular_file.read_regular(path, max_bytes, dir_fd=dir_fd, expected=expected)
    except regular_file.NotRegularFileError as exc:
        if exc.reason == "not regular":
            raise ConfigError(
                f"cannot read {relative}: not a regular file (a FIFO, a device or a "
                "directory); replace it with the file, or run with --no-devcontainer"
            ) from None
        if exc.reason == "changed":
            raise ConfigError(f"{relative} changed while being read; run again") from None
        failure: OSError = exc
    except OSError as exc:
        failure = exc
    raise ConfigError(
        f"cannot read {relative}: {failure}; a dev container file must be a regular file "
        "inside the workspace (or run with --no-devcontainer)"
    ) from failure


def _inside(workspace: Path, path: Path, relative: str, key: str) -> Path:
    """`path` normalised; refused unless it lies inside the workspace with no link."""
    normal = Path(os.path.normpath(path))
    try:
        check_confined(workspace, normal)
    except UnsafeMountError as exc:
        raise ConfigError(
            f"{relative}: `{key}` must name a path inside the workspace with no symbolic "
            f"link on the way ({exc})"
        ) from exc
    return normal


def _text(doc: dict[str, object], key: str, relative: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{relative}: `{key}` must be a non-empty string")
    return value.strip()
