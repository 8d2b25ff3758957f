"""The run's image choices, made once before any sandbox starts: `--image`,
`--bash-image`, and the workspace's dev container (built offline when it has a
Dockerfile). The precedence between them and agent files is `agents.images`;
`warden exec` follows the same order without the agent file (`command_image`).

Imports of `agents` are deferred: `warden exec` uses this module and stays light."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.images.choice import SandboxImage, SandboxImages

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.agents.images import RunImages
    from orchestrator.images.devcontainer import DevContainer

log = logging.getLogger("warden.images")


def dev_container_of(
    settings: Settings, workspace: Path, *, image: str | None, devcontainer: bool | None
) -> DevContainer | None:
    """The workspace's dev container when this run would use it (the setting, or the
    flag; never when `--image` covers every agent it would apply to). Its warnings
    (keys not applied) are logged, once each. Raises ConfigError for an unreadable
    devcontainer.json."""
    from orchestrator.images.devcontainer import find_devcontainer

    wanted = settings.devcontainer if devcontainer is None else devcontainer
    if not wanted or image is not None:
        return None
    found = find_devcontainer(workspace)
    if found is None:
        return None
    for warning in found.warnings:
        log.warning("%s", warning)
    if found.image is None and found.dockerfile is None:
        return None
    return found


def untrusted_devcontainer(workspace: Path) -> bool:
    """In a workspace the person has not trusted, the dev container is not used
    unless asked for: its image or Dockerfile is workspace content, which a subagent
    of an earlier run may have written, and building a Dockerfile runs its steps.
    Says so once when there is one; returns the `devcontainer` choice (False)."""
    from orchestrator.images.devcontainer import find_devcontainer

    try:
        found = find_devcontainer(workspace)
    except ConfigError:  # unreadable: not used either way, and nothing more to say
        found = None
    if found is not None:
        log.warning(
            "%s: the dev container is not used: the workspace is not trusted (trust it "
            "with --trust-workspace, or ask for it with --devcontainer)",
            found.relative,
        )
    return False


def describe_run_images(
    settings: Settings,
    workspace: Path,
    *,
    image: str | None = None,
    bash_image: str | None = None,
    devcontainer: bool | None = None,
) -> RunImages:
    """The run's choices as `warden agents list/show` and `warden doctor` show them,
    without building anything (a dev container Dockerfile is named, not built)."""
    from orchestrator.agents.images import RunImages

    found = dev_container_of(settings, workspace, image=image, devcontainer=devcontainer)
    dev_name = None
    if found is not None:
        if found.dockerfile is not None:
            dev_name = f"(built from {found.dockerfile.relative_to(workspace.resolve()).as_posix()})"
        else:
            dev_name = found.image
    return RunImages(
        image=image,
        devcontainer=dev_name,
        devcontainer_source=found.relative if found else "",
        bash_image=bash_image,
    )


class RunImageResolver:
    """`runtime.protocols.ImageResolver` for one run: the agent's image by the
    precedence, resolved (and checked) by `SandboxImages`."""

    def __init__(self, images: SandboxImages, run: RunImages) -> None:
        self.images = images
        self.run = run

    def __call__(self, agent: AgentDefinition) -> SandboxImage:
        from orchestrator.agents.images import choose_image

        return self.images.get(choose_image(agent, self.run).name)

    def named(self, name: str) -> SandboxImage:
        """One of warden's images by name (`agent` for hook sandboxes), whatever the
        run's agents use."""
        return self.images.get(name)


def prepare_run_images(
    client: DockerClient,
    settings: Settings,
    workspace: Path,
    *,
    image: str | None = None,
    bash_image: str | None = None,
    devcontainer: bool | None = None,
) -> RunImageResolver:
    """Build the dev container if needed and check every run-level image now, so an
    unusable one stops the run before any sandbox starts. Raises ImageNotFoundError,
    UnsupportedImageError, ConfigError, ImageBuildError (each naming the fix)."""
    from orchestrator.agents.images import RunImages
    from orchestrator.images.devbuild import devcontainer_image

    found = dev_container_of(settings, workspace, image=image, devcontainer=devcontainer)
    dev_tag = devcontainer_image(client, found, log.info) if found is not None else None
    run = RunImages(
        image=image,
        devcontainer=dev_tag,
        devcontainer_source=found.relative if found else "",
        bash_image=bash_image,
    )
    images = SandboxImages(client, settings.state_dir)
    for name in (image, dev_tag, bash_image):
        if name is not None:
            images.get(name)
    return RunImageResolver(images, run)


def command_image(
    client: DockerClient,
    settings: Settings,
    workspace: Path,
    *,
    image: str | None,
    devcontainer: bool | None,
    default: str,
    progress: Callable[[str], None] = log.info,
) -> str:
    """The image of a one-off command (`warden exec`) by the run's precedence without
    the agent file: `--image`, else the workspace's dev container (built if needed;
    used by default only in a trusted workspace, as for `warden run`), else
    `default`. Nothing is imported or read beyond two `stat`s when the workspace has
    no dev container. A build's output goes to `progress`. Raises ConfigError,
    ImageBuildError."""
    from orchestrator.images.devcontainer import CONFIG_PATHS

    if image is not None or devcontainer is False:
        return image or default
    if not any((workspace / path).exists() for path in CONFIG_PATHS):
        return default
    if devcontainer is None:
        from orchestrator.workspace.trust import is_trusted

        if not is_trusted(settings, workspace):
            devcontainer = untrusted_devcontainer(workspace)
    found = dev_container_of(settings, workspace, image=None, devcontainer=devcontainer)
    if found is None:
        return default
    from orchestrator.images.devbuild import devcontainer_image

    return devcontainer_image(client, found, progress)
