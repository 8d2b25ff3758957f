"""Locks in the parts of a bounded dev container build that need no engine: the
limits come from WARDEN_BUILD_* (named in every error), an engine that cannot
nest a build's cgroups refuses a process limit before anything starts, and the
images a failed build made are told apart from base images and cache hits; a
Dockerfile that is not a regular file is refused before anything waits on it."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.backend.contract import BuildLimits
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, ImageBuildError
from orchestrator.images.buildbox import BuildBox
from orchestrator.images.devbuild import BuildOutput
from tests.conftest import without_waiting_on


def test_the_build_limits_are_settings() -> None:
    assert BuildLimits.from_settings(Settings.from_env({})) == BuildLimits()
    limits = BuildLimits.from_settings(Settings.from_env({
        "WARDEN_BUILD_PIDS_LIMIT": "64", "WARDEN_BUILD_MEMORY": "256m",
        "WARDEN_BUILD_DEADLINE_S": "30",
    }))  # fmt: skip
    assert limits == BuildLimits(pids=64, memory_bytes=256 * 1024**2, deadline_s=30)
    for bad in ({"WARDEN_BUILD_PIDS_LIMIT": "-1"}, {"WARDEN_BUILD_DEADLINE_S": "0"},
                {"WARDEN_BUILD_MEMORY": "lots"}):  # fmt: skip
        with pytest.raises(ConfigError, match=r"WARDEN_BUILD|build_"):
            Settings.from_env(bad)


class Engine:
    """Just enough of a docker client to answer `info()`."""

    def __init__(self, driver: str, version: str) -> None:
        self._info = {"CgroupDriver": driver, "CgroupVersion": version}
        self.containers = self

    def info(self) -> dict[str, Any]:
        return self._info

    def run(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing may start")


@pytest.mark.parametrize(("driver", "version"), [("systemd", "2"), ("cgroupfs", "2"),
                                                 ("systemd", "1")])  # fmt: skip
def test_an_engine_that_cannot_limit_a_builds_processes_refuses_before_starting(
    driver: str, version: str
) -> None:
    box = BuildBox(Engine(driver, version), BuildLimits(), holder_image="bash")  # type: ignore[arg-type]
    with pytest.raises(ImageBuildError, match="WARDEN_BUILD_PIDS_LIMIT=0") as refused:
        box.__enter__()
    assert "cannot limit the processes" in str(refused.value)


def test_a_failed_builds_own_images_are_told_from_base_images_and_cache_hits() -> None:
    shown: list[str] = []
    output = BuildOutput(shown.append)
    output.add("Step 1/4 : FROM base:1\n ---> aaaaaaaaaaaa\n")
    output.add("Step 2/4 : RUN echo cached\n ---> Using cache\n ---> bbbbbbbbbbbb\n")
    output.add("Step 3/4 : RUN make\n ---> Running in cccccccccccc\n\x1b[91mwarning\n\x1b[0m")
    output.add("Removing intermediate container cccccccccccc\n ---> dddddddddddd\n")
    output.add("Step 4/4 : COPY . /src\n ---> eeeeeeeeeeee\n")
    assert output.created == ["dddddddddddd", "eeeeeeeeeeee"]
    assert "  warning" in shown, "the builder's colour codes are dropped"
    assert all("\x1b" not in line for line in output.recent)


def test_a_dockerfile_that_is_a_fifo_is_refused_without_waiting(tmp_path: Any) -> None:
    """A sandbox can leave a FIFO where the dev container's Dockerfile goes; the build
    refuses it at once (reading it waited for a writer, for good) and starts nothing."""
    import os

    from docker.errors import ImageNotFound

    from orchestrator.images.devbuild import devcontainer_image
    from orchestrator.images.devcontainer import find_devcontainer

    class NoImages:
        def __init__(self) -> None:
            self.images = self

        def get(self, ref: str) -> Any:
            raise ImageNotFound(ref)

    (tmp_path / ".devcontainer").mkdir()
    (tmp_path / ".devcontainer/devcontainer.json").write_text(
        '{"build": {"dockerfile": "Dockerfile"}}'
    )
    os.mkfifo(tmp_path / ".devcontainer/Dockerfile")
    dev = find_devcontainer(tmp_path)
    assert dev is not None
    fifo = tmp_path / ".devcontainer/Dockerfile"
    outcome = without_waiting_on(fifo, lambda: devcontainer_image(NoImages(), dev, print))  # type: ignore[arg-type]
    assert isinstance(outcome, ConfigError), outcome
    assert "Dockerfile: not a regular file" in str(outcome)
