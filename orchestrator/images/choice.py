"""An image ready to run a subagent in (`SandboxImage`), and the resolver that
makes one from a name for a run (`SandboxImages`).

warden's own images (`agent`, `bash`) carry the runner and start it with their
own python3. Any other local image is a project image: it is checked first
(`images.project`: Linux, this machine's architecture, bash on its PATH), then
gets warden's Python runtime mounted read-only (`images.runtime`) and the runner
started through it, so the image needs no Python. The sandbox around either is
the same (`backend.hardening`).
"""

from __future__ import annotations

import threading
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.backend.contract import Mount
from orchestrator.errors import ConfigError
from orchestrator.values import value

if TYPE_CHECKING:
    from docker import DockerClient

WARDEN_RUNNER = ("python3", "-m", "sandbox_tools")
"""The runner in warden's own images (their python3 has it installed)."""
WARDEN_RUNNER_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
"""Set only in warden's own images: in a project image they would reach the
project's own Python (the borrowed runtime ignores them: `-I`)."""
NOT_RUNNABLE = frozenset({"runtime"})
"""warden image kinds that are not sandbox images."""


@value
class SandboxImage:
    """What to run for one image name, and what warden adds to the container."""

    name: str
    """As asked: `agent`, `bash`, or a local image reference."""
    ref: str
    """What the engine runs: a content tag for warden's images, the image id for a
    project image (the id that was checked, so a re-tag cannot swap it)."""
    runner: tuple[str, ...] = WARDEN_RUNNER
    """The command that starts the runner (`--wait` and the like are appended)."""
    mounts: tuple[Mount, ...] = ()
    """Read-only mounts the runner needs (warden's runtime, for project images)."""
    env: dict[str, str] = field(default_factory=dict)
    project: bool = False
    """True for a project image (runtime borrowed from warden)."""
    remembered: bool = False
    """True when `ref` is the id a hint named, not confirmed by the engine this time
    (`SandboxImages.remembered`)."""


class SandboxImages:
    """Image names to `SandboxImage`s for one run; each name is resolved (and a
    project image checked, the runtime copied out) once. Thread-safe."""

    def __init__(self, client: DockerClient, state_dir: Path) -> None:
        self._client = client
        self._state_dir = state_dir
        self._found: dict[tuple[str, bool], SandboxImage] = {}
        self._lock = threading.Lock()

    def get(self, name: str, *, runner: bool = True) -> SandboxImage:
        """The image for a subagent (`runner`: the runner runs in it, so a project
        image needs bash and gets warden's runtime), or, `runner=False`, for a plain
        command (`warden exec`: only Linux on this architecture is required, and
        nothing of warden's is added to a project image).
        Raises ImageNotFoundError (not built / not present, with the fix),
        UnsupportedImageError (which images work, and the fix), ConfigError."""
        with self._lock:
            key = (name, runner)
            if key not in self._found:
                self._found[key] = self._resolve(name, runner)
            return self._found[key]

    def remembered(self, name: str) -> SandboxImage | None:
        """warden's own image `name` by the id this state directory last confirmed, with
        no engine call (`images.remembered_image`: a create of an image removed since
        fails with ImageNotFoundError, and `get` looks it up again); None for a project
        image, for the runtime (`get` refuses it) or when there is no such hint."""
        from orchestrator.images import KINDS, remembered_image

        if name not in KINDS or name in NOT_RUNNABLE or self._state_dir is None:
            return None
        found = remembered_image(name, self._state_dir)
        if found is None:
            return None
        return SandboxImage(name=name, ref=found, env=dict(WARDEN_RUNNER_ENV), remembered=True)

    def _resolve(self, name: str, runner: bool) -> SandboxImage:
        from orchestrator.images import KINDS, current_tag, resolve_image

        if name in NOT_RUNNABLE:
            raise ConfigError(
                f"{name!r} is warden's Python runtime for project images, not an image to "
                "run a subagent in; use agent, bash or a local image"
            )
        if name in KINDS:
            return SandboxImage(
                name=name,
                ref=resolve_image(self._client, name, self._state_dir),
                env=dict(WARDEN_RUNNER_ENV),
            )
        # Only a project image needs these (`warden exec -- true` does not pay for them).
        from orchestrator.images.project import check_project_image, host_machine

        if not runner:
            # A plain command runs as the image's own entrypoint would: under the
            # engine's init, with the image's environment; nothing of warden's in it.
            checked = check_project_image(self._client, name, host_machine(), need_bash=False)
            return SandboxImage(name=name, ref=checked.image_id, runner=(), project=True)
        from orchestrator.images.runtime import ensure_runtime

        runtime = ensure_runtime(
            self._client, current_tag(self._client, "runtime", self._state_dir), self._state_dir
        )
        checked = check_project_image(self._client, name, runtime.machine)
        return SandboxImage(
            name=name,
            ref=checked.image_id,
            runner=runtime.runner(),
            mounts=(runtime.mount(),),
            env=checked.sandbox_env(),
            project=True,
        )
