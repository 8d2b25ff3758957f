"""The run's image choices, made once before any sandbox starts: `--image`,
`--bash-image`, and the workspace's dev container (built offline when it has a
Dockerfile). The precedence between them and agent files is `agents.images`;
`warden exec` follows the same order without the agent file (`command_image`).

Imports of `agents` are deferred: `warden exec` uses this module and stays light."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import owner
from orchestrator.backend.contract import BuildLimits
from orchestrator.config import Settings
from orchestrator.images.choice import SandboxImage, SandboxImages

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.agents.images import RunImages
    from orchestrator.broker.listener import SandboxIdentity
    from orchestrator.egress.limits import EgressLimits
    from orchestrator.egress.resolver import Resolver
    from orchestrator.egress.rules import RuleSet
    from orchestrator.egress.setup import EgressRequest
    from orchestrator.images.buildbox import BuildEgress
    from orchestrator.images.devbuild import EgressFactory
    from orchestrator.images.devcontainer import DevContainer
    from orchestrator.images.devcontext import DevContainerInputs
    from orchestrator.permissions import EffectivePolicy
    from orchestrator.permissions.settings_files import SettingsStack
    from orchestrator.permissions.sources import PolicyDocument

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


def untrusted_devcontainer(dev: DevContainerInputs | None) -> bool:
    """In a workspace the person has not trusted, the dev container is not used
    unless asked for: its image or Dockerfile is workspace content, which a subagent
    of an earlier run may have written, and building a Dockerfile runs its steps.
    Says so once when there is one (`dev`: as the run read it); returns the
    `devcontainer` choice (False)."""
    if dev is not None and dev.dev is not None:  # unreadable: nothing more to say
        log.warning(
            "%s: the dev container is not used: the workspace is not trusted (trust it "
            "with `warden trust` or --trust-workspace, or ask for it with --devcontainer)",
            dev.relative,
        )
    return False


def _snapshot_dev(
    settings: Settings,
    dev: DevContainerInputs | None,
    *,
    image: str | None,
    devcontainer: bool | None,
) -> DevContainer | None:
    """The dev container as read once, when this run would use it (as
    `dev_container_of`); raises the ConfigError that kept it from being read."""
    wanted = settings.devcontainer if devcontainer is None else devcontainer
    if not wanted or image is not None or dev is None:
        return None
    found = dev.config()
    for warning in found.warnings:
        log.warning("%s", warning)
    if found.image is None and found.dockerfile is None:
        return None
    return found


def describe_run_images(
    settings: Settings,
    workspace: Path,
    *,
    image: str | None = None,
    bash_image: str | None = None,
    devcontainer: bool | None = None,
    trusted: bool,
) -> RunImages:
    """The run's choices as `warden agents list/show` and `warden doctor` show them,
    without building anything (a dev container Dockerfile is named, not built). An
    untrusted workspace's dev container is not used unless asked for, as in a run."""
    from orchestrator.agents.images import RunImages

    if devcontainer is None and not trusted:
        devcontainer = False
    found = dev_container_of(settings, workspace, image=image, devcontainer=devcontainer)
    dev_name = None
    if found is not None:
        if found.dockerfile is not None:
            dev_name = (
                f"(built from {found.dockerfile.relative_to(workspace.resolve()).as_posix()})"
            )
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
    build_egress: EgressFactory | None = None,
    dev: DevContainerInputs | None = None,
    dev_read: bool = False,
) -> RunImageResolver:
    """Build the dev container if needed (within the settings' `BuildLimits`, with the
    network `build_egress` gives, none by default) and check every run-level image
    now, so an unusable one stops the run before any sandbox starts. `dev` (when
    `dev_read`): the dev container as the run read it once (`workspace.inputs`),
    whose config and context tar are what is used and built; else read now. Raises
    ImageNotFoundError, UnsupportedImageError, ConfigError, ImageBuildError (each
    naming the fix)."""
    from orchestrator.agents.images import RunImages
    from orchestrator.images.devbuild import devcontainer_image
    from orchestrator.images.devcontext import read_devcontainer

    if not dev_read:
        dev = read_devcontainer(workspace)
    found = _snapshot_dev(settings, dev, image=image, devcontainer=devcontainer)
    dev_tag = None
    if found is not None:
        assert dev is not None
        dev_tag = devcontainer_image(
            client,
            found,
            log.info,
            limits=BuildLimits.from_settings(settings),
            owner_labels=owner.current(settings.state_dir).labels(),
            egress=build_egress,
            context=dev.build_context() if found.dockerfile is not None else None,
        )
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
    build_egress: EgressFactory | None = None,
) -> str:
    """The image of a one-off command (`warden exec`) by the run's precedence without
    the agent file: `--image`, else the workspace's dev container (built if needed;
    used by default only in a trusted workspace, as for `warden run`), else
    `default`. Nothing is imported or read beyond two `stat`s when the workspace has
    no dev container. A build's output goes to `progress`; it runs as
    `prepare_run_images` runs one. Raises ConfigError, ImageBuildError."""
    from orchestrator.images.devcontainer import CONFIG_PATHS

    if image is not None or devcontainer is False:
        return image or default
    if not any(os.path.lexists(workspace / path) for path in CONFIG_PATHS):
        return default
    from orchestrator.images.devcontext import read_devcontainer

    # Read once: trust is decided from these bytes and this context tar, and the
    # build uses them (`images.devcontext`).
    dev = read_devcontainer(workspace)
    if devcontainer is None:
        from orchestrator.workspace.trust import verdict

        if not verdict(settings, workspace, dev=dev, dev_read=True).trusted:
            devcontainer = untrusted_devcontainer(dev)
    found = _snapshot_dev(settings, dev, image=None, devcontainer=devcontainer)
    if found is None:
        return default
    assert dev is not None
    from orchestrator.images.devbuild import devcontainer_image

    return devcontainer_image(
        client,
        found,
        progress,
        limits=BuildLimits.from_settings(settings),
        owner_labels=owner.current(settings.state_dir).labels(),
        egress=build_egress,
        context=dev.build_context() if found.dockerfile is not None else None,
    )


@contextmanager
def oneoff_build_egress(
    rules: RuleSet,
    limits: EgressLimits,
    identity: SandboxIdentity,
    resolver: Resolver | None = None,
) -> Iterator[BuildEgress | None]:
    """Egress for a dev container build: a proxy with the run's (or the command's)
    domain rules and no one to ask, since a build cannot wait for an answer (what
    is not allowed is refused, and reported on stderr when it closes). None when no
    rule allows a domain: the build has no network."""
    from orchestrator.broker.listener import groups_for
    from orchestrator.egress.oneoff import start_oneoff_egress
    from orchestrator.images.buildbox import BuildEgress
    from orchestrator.lifecycle.socket_dirs import socket_root

    if not rules.any_allow:
        yield None
        return
    proxy = start_oneoff_egress(
        rules, limits, identity, socket_root=socket_root(), resolver=resolver, task_id="devbuild"
    )
    try:
        yield BuildEgress(proxy.socket_dir, proxy.user, tuple(groups_for(proxy.socket_dir)))
    finally:
        proxy.close()


def run_build_egress(
    settings: Settings,
    workspace: Path,
    request: EgressRequest,
    policy: EffectivePolicy,
    *,
    policy_file: str | PolicyDocument | None,
    identity: SandboxIdentity,
    trusted: bool,
    stack: SettingsStack | None = None,
) -> EgressFactory:
    """What a run's dev container build may reach: the run's own domain rules
    (`egress.sources.load_rules`, read only when a build starts; an untrusted
    workspace's allowed domains do not count), no questions."""

    def start() -> AbstractContextManager[BuildEgress | None]:
        from orchestrator.egress.sources import load_rules

        rules = load_rules(
            settings,
            workspace,
            policy,
            allow_domains=request.allow_domains,
            deny_domains=request.deny_domains,
            policy_file=policy_file,
            trusted=trusted,
            stack=stack,
        )
        return oneoff_build_egress(rules, request.limits, identity, request.resolver)

    return start
