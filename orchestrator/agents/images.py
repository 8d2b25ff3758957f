"""Which image each subagent type runs in, when the agent file, the command line
and the workspace's dev container disagree. The order, highest first:

1. the agent file's `image:` (it names the image its prompt was written for);
2. `--image` on the command line;
3. the workspace's dev container (`.devcontainer/devcontainer.json`), unless
   turned off (`--no-devcontainer`, `WARDEN_DEVCONTAINER=0`);
4. warden's default, the general-purpose `agent` image.

The built-in `bash` type is the exception: it keeps the restricted `bash` image
(no package managers, compilers or network clients) whatever 2 and 3 say, and
runs in another image only when `--bash-image` names one, so a person chooses
that explicitly and `warden agents show bash` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.agents.definition import BUILTIN_SOURCE, IMAGE_AGENT, IMAGE_BASH, AgentDefinition

RESTRICTED_NOTE = (
    "warden's restricted bash image; --image and the dev container do not apply to this "
    "type (--bash-image IMAGE gives it another)"
)


@dataclass(frozen=True)
class RunImages:
    """The run's own image choices (command line and workspace)."""

    image: str | None = None
    """`--image`."""
    devcontainer: str | None = None
    """The dev container's image (a built tag or the image it names); None: none used."""
    devcontainer_source: str = ""
    """The devcontainer.json it came from, for messages."""
    bash_image: str | None = None
    """`--bash-image`: the built-in bash type's image instead of the restricted one."""


@dataclass(frozen=True)
class ImageChoice:
    """The image a subagent type runs in, and why."""

    name: str
    origin: str
    """Which rule chose it, in words (shown by `warden agents list/show`)."""
    restricted_instead: bool = False
    """True when the built-in bash type runs in a project image instead of its
    restricted one (`--bash-image`)."""


def choose_image(agent: AgentDefinition, run: RunImages) -> ImageChoice:
    """The image for `agent` in a run with `run`'s choices (see the module doc)."""
    if agent.source == BUILTIN_SOURCE and agent.image == IMAGE_BASH:
        if run.bash_image is not None:
            return ImageChoice(
                run.bash_image,
                "--bash-image (instead of the restricted bash image: package managers, "
                "compilers and network clients in it are available to this type)",
                restricted_instead=True,
            )
        return ImageChoice(IMAGE_BASH, RESTRICTED_NOTE)
    if agent.image is not None:
        return ImageChoice(agent.image, f"the agent file's image: ({agent.source})")
    if run.image is not None:
        return ImageChoice(run.image, "--image")
    if run.devcontainer is not None:
        return ImageChoice(run.devcontainer, f"the dev container ({run.devcontainer_source})")
    return ImageChoice(IMAGE_AGENT, "warden's default")
