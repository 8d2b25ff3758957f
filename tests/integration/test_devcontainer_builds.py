"""A dev container's Dockerfile is hostile input the engine runs, so its build is
bounded: the processes and memory of all its steps together and a total deadline;
crossing one fails the build with an error naming the limit and its variable,
and leaves no step container, holder or half-built image behind. Its steps have
no network unless the run's egress grants domains, and then only through
warden's proxy with the run's rules. Real engine, real builds, kept short."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backend.contract import BuildLimits
from orchestrator.config import Settings
from orchestrator.images.buildbox import BuildLimitError
from tests.integration.harness import scripted_run
from tests.integration.project_fixtures import cc_image, engine
from tests.integration.test_project_images import delegate, dev_container

pytestmark = pytest.mark.integration
__all__ = ["cc_image", "engine"]

MARK = "warden-test.build"


def dockerfile(base: str, marker: str, *steps: str) -> str:
    """A Dockerfile whose images (and so its step containers) all carry `marker`:
    the label is the first instruction, so a test can find whatever the build made."""
    return "\n".join([f"FROM {base}", f"LABEL {MARK}={marker}", "USER 0", *steps, ""])


def left_behind(engine: Any, marker: str) -> list[str]:
    """Everything of a build still on the engine: its images, step containers and
    warden's holder containers."""
    found = [
        f"image {i.id}" for i in engine.images.list(all=True, filters={"label": f"{MARK}={marker}"})
    ]
    found += [
        f"container {c.name}"
        for c in engine.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{MARK}={marker}"}
        )
    ]
    found += [
        f"holder {c.name}"
        for c in engine.containers.list(
            ignore_removed=True, all=True, filters={"label": "warden.images=build"}
        )
    ]
    return found  # fmt: skip


def build(engine: Any, settings: Settings, workspace: Path, text: str, **limits: Any) -> str:
    from orchestrator.runtime.run_images import prepare_run_images

    dev_container(workspace, {"build": {"dockerfile": "Dockerfile"}}, text)
    chosen = BuildLimits(**limits)
    bounded = replace(
        settings, build_pids_limit=chosen.pids, build_memory=chosen.memory_bytes,
        build_deadline_s=chosen.deadline_s, build_disk_limit=chosen.disk_bytes,
    )  # fmt: skip
    resolver = prepare_run_images(engine, bounded, workspace)
    assert resolver.run.devcontainer is not None
    return resolver.run.devcontainer


def test_a_fork_bomb_step_stops_the_build_at_the_process_limit(
    engine: Any, settings: Settings, workspace: Path, cc_image: str
) -> None:
    marker = uuid.uuid4().hex
    text = dockerfile(
        cc_image, marker,
        f"RUN echo {marker} > /etc/made-before-the-bomb",  # a step image to be removed
        "RUN bomb() { bomb | bomb & }; bomb; sleep 120",
    )  # fmt: skip
    with pytest.raises(BuildLimitError) as stopped:
        build(engine, settings, workspace, text, pids=64, deadline_s=90)
    message = str(stopped.value)
    assert "process limit of 64" in message and "WARDEN_BUILD_PIDS_LIMIT" in message, message
    assert "deadline" not in message, "it stopped at the process limit, not the deadline"
    assert left_behind(engine, marker) == []


DISK_CAP = 64 * 1024**2


@pytest.mark.parametrize(
    "writes",
    [
        "dd if=/dev/zero of=/opt/big bs=1M count=200",  # one file past the cap
        "for i in 1 2 3 4 5; do dd if=/dev/zero of=/opt/f$i bs=1M count=20; done",  # many below it
    ],
)
def test_a_build_that_writes_past_its_disk_cap_stops_naming_it_and_leaves_nothing(
    writes: str, engine: Any, settings: Settings, workspace: Path, cc_image: str
) -> None:
    marker = uuid.uuid4().hex
    text = dockerfile(cc_image, marker, f"RUN echo {marker} > /etc/made", f"RUN {writes}")
    with pytest.raises(BuildLimitError) as stopped:
        build(engine, settings, workspace, text, disk_bytes=DISK_CAP, deadline_s=120)
    message = str(stopped.value)
    assert "disk limit of 64 MiB" in message and "WARDEN_BUILD_DISK_LIMIT" in message, message
    assert left_behind(engine, marker) == []


def test_an_archive_that_unpacks_past_the_disk_cap_stops_the_build(
    engine: Any, settings: Settings, workspace: Path, cc_image: str
) -> None:
    """A small archive in the context that unpacks to more than the cap: `ADD` no
    longer unpacks it in the engine (it is copied), and unpacking it in a step stops
    at the cap."""
    import gzip
    import tarfile

    marker = uuid.uuid4().hex
    folder = workspace / ".devcontainer"
    folder.mkdir()
    with (
        gzip.open(folder / "bomb.tar.gz", "wb", compresslevel=1) as packed,
        tarfile.open(fileobj=packed, mode="w") as archive,
    ):
        info = tarfile.TarInfo("zeros")
        info.size = 4 * DISK_CAP
        archive.addfile(info, _Zeros(info.size))
    assert (folder / "bomb.tar.gz").stat().st_size < DISK_CAP // 8
    text = dockerfile(
        cc_image, marker, "ADD bomb.tar.gz /opt/", "RUN ls -l /opt/bomb.tar.gz",
        "RUN tar -xzf /opt/bomb.tar.gz -C /opt",
    )  # fmt: skip
    (folder / "devcontainer.json").write_text('{"build": {"dockerfile": "Dockerfile"}}')
    (folder / "Dockerfile").write_text(text)
    from orchestrator.runtime.run_images import prepare_run_images
    from tests.integration.project_fixtures import project_workspace

    project_workspace(workspace)
    bounded = replace(settings, build_disk_limit=DISK_CAP)
    with pytest.raises(BuildLimitError) as stopped:
        prepare_run_images(engine, bounded, workspace)
    assert "disk limit of 64 MiB" in str(stopped.value), stopped.value
    assert left_behind(engine, marker) == []


class _Zeros:
    """A file object of `size` zero bytes (made as it is read)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def test_a_step_past_the_deadline_stops_the_build_and_leaves_nothing(
    engine: Any, settings: Settings, workspace: Path, cc_image: str
) -> None:
    marker = uuid.uuid4().hex
    text = dockerfile(cc_image, marker, f"RUN echo {marker} > /etc/made", "RUN sleep 600")
    with pytest.raises(BuildLimitError) as stopped:
        build(engine, settings, workspace, text, deadline_s=4)
    message = str(stopped.value)
    assert "build deadline of 4 s" in message and "WARDEN_BUILD_DEADLINE_S" in message, message
    # The engine is not still running the step after warden gave up on it.
    assert left_behind(engine, marker) == []


def test_the_memory_of_a_build_is_capped(
    engine: Any, settings: Settings, workspace: Path, cc_image: str
) -> None:
    marker = uuid.uuid4().hex
    text = dockerfile(
        cc_image, marker, "RUN bash -c 'x=$(head -c 400m /dev/zero | tr \"\\0\" a); echo ${#x}'"
    )
    with pytest.raises(BuildLimitError) as stopped:
        build(engine, settings, workspace, text, memory_bytes=128 * 1024**2, deadline_s=90)
    message = str(stopped.value)
    assert "memory limit of 128 MiB" in message and "WARDEN_BUILD_MEMORY" in message, message
    assert left_behind(engine, marker) == []


async def test_build_steps_reach_only_what_the_run_s_egress_allows(
    settings: Settings, workspace: Path, engine: Any, cc_image: str
) -> None:
    from orchestrator.egress.resolver import StaticResolver
    from orchestrator.egress.setup import EgressRequest
    from tests.egress_support import upstream

    marker = uuid.uuid4().hex
    # Plain HTTP through the build's proxy variables, with bash's /dev/tcp.
    fetch = (
        "p=${HTTP_PROXY##*:}; p=${p%%/*}; for host in allowed.test denied.test; do "
        "exec 3<>/dev/tcp/127.0.0.1/$p; "
        'printf "GET http://$host:PORT/hello HTTP/1.1\\r\\nHost: $host\\r\\nConnection: '
        'close\\r\\n\\r\\n" >&3; echo "$host: $(head -1 <&3 | tr -d "\\r")" >> /etc/fetched; '
        "exec 3<&-; done; echo net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | "
        "tr '\\n' ,) >> /etc/fetched"
    )
    built: list[str] = []
    try:
        with upstream() as port:
            text = dockerfile(
                cc_image, marker, 'SHELL ["/bin/bash", "-c"]', "RUN " + fetch.replace("PORT", str(port))
            )  # fmt: skip
            dev_container(workspace, {"build": {"dockerfile": "Dockerfile"}}, text)
            egress = EgressRequest(
                allow_domains=("allowed.test",),
                deny_domains=("denied.test",),
                resolver=StaticResolver(
                    dict.fromkeys(("allowed.test", "denied.test"), "127.0.0.1")
                ),
            )
            script = delegate("cat /etc/fetched")
            async with scripted_run(settings, workspace, script, egress=egress) as (run, _):
                built.append(run.manager.plan.image_resolver.run.devcontainer)  # type: ignore[attr-defined]
                result = await run.parent.run("what did the build fetch?")
        assert "allowed.test: HTTP/1.1 200" in result.text, result.text
        assert "denied.test: HTTP/1.1 403" in result.text, result.text
        assert "net=lo," in result.text, "the build step had no network but lo"
    finally:
        for tag in built:
            engine.images.remove(tag, force=True)


def test_warden_exec_builds_the_dev_container_in_the_same_box(
    engine: Any, workspace: Path, cc_image: str
) -> None:
    """`warden exec` builds a dev container Dockerfile too, within the limits the
    WARDEN_BUILD_* variables set; a build past its deadline is warden's failure (125)."""
    from tests.conftest import REPO_ROOT
    from tests.integration.test_project_images import warden

    marker = uuid.uuid4().hex
    text = dockerfile(cc_image, marker, f"RUN echo {marker} > /etc/built", "RUN sleep 600")
    dev_container(workspace, {"build": {"dockerfile": "Dockerfile"}}, text)
    done = warden("exec", "--devcontainer", "--workspace", str(workspace), "--", "true",
                  cwd=REPO_ROOT, env={"WARDEN_BUILD_DEADLINE_S": "3"})  # fmt: skip
    assert done.returncode == 125, done.stderr
    assert "build deadline of 3 s (WARDEN_BUILD_DEADLINE_S" in done.stderr, done.stderr
    assert left_behind(engine, marker) == []
    (workspace / ".devcontainer" / "Dockerfile").write_text(
        dockerfile(cc_image, marker, f"RUN echo {marker} > /etc/built")
    )
    done = warden("exec", "--devcontainer", "--workspace", str(workspace), "--", "cat",
                  "/etc/built", cwd=REPO_ROOT)  # fmt: skip
    try:
        assert done.returncode == 0 and done.stdout.strip() == marker, done.stderr
    finally:
        for image in engine.images.list(filters={"label": f"{MARK}={marker}"}):
            engine.images.remove(image.id, force=True)


def test_a_failed_build_leaves_the_image_another_process_built_meanwhile(
    engine: Any, settings: Settings, workspace: Path, cc_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Two runs (two CI jobs) start building the same dev container; the second
    finishes while the first is still building, and the first then fails (the
    engine errs, Ctrl-C). The first removed the tag it never made, the second's
    image, and the second run's sandboxes failed to start ("No such image")."""
    from orchestrator.images.buildbox import BuildBox

    marker = uuid.uuid4().hex
    text = dockerfile(cc_image, marker, f"RUN echo {marker} > /etc/made")
    real_build = BuildBox.build
    others: list[str] = []

    def the_other_finishes_first(box: BuildBox, context: Any, params: Any) -> Any:
        if not others:  # the first build: the other one starts and ends meanwhile
            monkeypatch.setattr(BuildBox, "build", real_build)
            other = workspace.parent / "other"
            other.mkdir()
            others.append(build(engine, settings, other, text))
            yield {"stream": "Step 1/4 : FROM ...\n"}
            yield {"error": "no space left on device"}  # this engine call fails

    monkeypatch.setattr(BuildBox, "build", the_other_finishes_first)
    try:
        with pytest.raises(Exception, match="no space left on device"):
            build(engine, settings, workspace, text)
        assert others, "the other build ran"
        assert engine.images.get(others[0]).labels.get(MARK) == marker  # still there
    finally:
        for image in engine.images.list(filters={"label": f"{MARK}={marker}"}):
            for tag in image.tags:
                engine.images.remove(tag, noprune=False)
    assert left_behind(engine, marker) == []
