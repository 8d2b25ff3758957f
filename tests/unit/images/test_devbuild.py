"""Locks in the parts of a bounded dev container build that need no engine: the
limits come from WARDEN_BUILD_* (named in every error), an engine that cannot
nest a build's cgroups refuses a process limit before anything starts, and the
images a failed build made are told apart from base images and cache hits; a
Dockerfile that is not a regular file is refused before anything waits on it; the
build context is read from what was opened, so a file or directory a sandbox swaps
for a link (or a FIFO) while it is read sends no host byte and hangs nothing."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backend.contract import BuildLimits
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, ImageBuildError
from orchestrator.images import devcontext
from orchestrator.images.buildbox import BuildBox
from orchestrator.images.devbuild import BuildOutput, _context_tar
from orchestrator.images.devcontainer import DevContainer, find_devcontainer
from tests.conftest import without_waiting_on


def test_the_build_limits_are_settings() -> None:
    assert BuildLimits.from_settings(Settings.from_env({})) == BuildLimits()
    limits = BuildLimits.from_settings(Settings.from_env({
        "WARDEN_BUILD_PIDS_LIMIT": "64", "WARDEN_BUILD_MEMORY": "256m",
        "WARDEN_BUILD_DEADLINE_S": "30", "WARDEN_BUILD_DISK_LIMIT": "100m",
    }))  # fmt: skip
    assert limits == BuildLimits(
        pids=64, memory_bytes=256 * 1024**2, deadline_s=30, disk_bytes=100 * 1024**2
    )
    # the disk cap follows the sandbox write limit unless it is set itself
    follows = BuildLimits.from_settings(Settings.from_env({"WARDEN_DISK_WRITE_LIMIT": "1g"}))
    assert follows.disk_bytes == 1024**3
    for bad in ({"WARDEN_BUILD_PIDS_LIMIT": "-1"}, {"WARDEN_BUILD_DEADLINE_S": "0"},
                {"WARDEN_BUILD_MEMORY": "lots"}, {"WARDEN_BUILD_DISK_LIMIT": "x"}):  # fmt: skip
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


def test_only_the_engines_own_line_for_this_builds_tag_counts_as_tagged() -> None:
    """A failed build removes its tag only when it made it; a step that prints a
    "Successfully tagged" line of its own must not make it remove the tag another
    process built meanwhile."""
    tag = "warden-devcontainer:0123456789ab"
    output = BuildOutput(lambda line: None, tag)
    output.add("Step 2/2 : RUN echo 'Successfully tagged warden-devcontainer:ffffffffffff'\n")
    output.add("Successfully tagged warden-devcontainer:ffffffffffff\nSuccessfully tagged x\n")
    assert not output.tagged
    output.add("Successfully built 0123abcd\nSuccessfully tagged warden-devcontainer:0123456789ab\n")
    assert output.tagged


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


HOST_SECRET = b"a host file no build may read\n"


def dev_container_with_context(tmp_path: Path) -> tuple[Path, DevContainer]:
    """A workspace whose dev container's context is the whole workspace (with a
    nested file, an executable, a link, and a file .dockerignore leaves out), and
    a host file outside it."""
    ws = tmp_path / "ws"
    (ws / ".devcontainer").mkdir(parents=True)
    (ws / ".devcontainer/devcontainer.json").write_text(
        '{"build": {"dockerfile": "Dockerfile", "context": ".."}}'
    )
    (ws / ".devcontainer/Dockerfile").write_text("FROM scratch\nCOPY app /app\n")
    (ws / "app").mkdir()
    (ws / "app/data.txt").write_text("workspace data, a little longer than the secret\n")
    (ws / "app/run.sh").write_text("#!/bin/sh\n")
    (ws / "app/run.sh").chmod(0o755)
    (ws / "app/latest").symlink_to("data.txt")
    (ws / "notes.log").write_text("left out\n")
    (ws / ".dockerignore").write_text("*.log\n")
    (tmp_path / "host-secret").write_bytes(HOST_SECRET)
    dev = find_devcontainer(ws)
    assert dev is not None
    return ws, dev


def members(archive: io.BytesIO) -> list[tuple[str, bytes, int, str, bytes | None]]:
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
        return sorted(
            (m.name, m.type, m.mode, m.linkname, f.read() if (f := tar.extractfile(m)) else None)
            for m in tar.getmembers()
        )


def test_the_build_context_is_what_the_docker_sdk_would_send(tmp_path: Path) -> None:
    """The same entries, modes, links and bytes as docker-py's own `tar` (so the
    engine builds the same thing and the content hash keeps its cached images)."""
    from docker.utils.build import tar

    _, dev = dev_container_with_context(tmp_path)
    ours, theirs = io.BytesIO(), io.BytesIO()
    _context_tar(dev, ours)
    tar(str(dev.context), exclude=["*.log"], dockerfile=(".devcontainer/Dockerfile", None),
        fileobj=theirs)  # fmt: skip
    assert members(ours) == members(theirs)
    assert "notes.log" not in [m[0] for m in members(ours)]


def swap_before_opening(monkeypatch: pytest.MonkeyPatch, name: str, swap: Callable[[], None]) -> None:
    """Run `swap` the moment the context's reader opens `name`: after it looked at
    what `name` is, before it reads it (where docker-py followed a link)."""
    real_open = os.open

    def racing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == name:
            swap()
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", racing_open)


def test_a_file_swapped_for_a_link_while_the_context_is_read_sends_no_host_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, dev = dev_container_with_context(tmp_path)

    def to_link() -> None:
        (ws / "app/data.txt").unlink()
        (ws / "app/data.txt").symlink_to(tmp_path / "host-secret")

    swap_before_opening(monkeypatch, "data.txt", to_link)
    sent = io.BytesIO()
    with pytest.raises(ImageBuildError, match=r"changed while it was read.*stop it and build again"):
        _context_tar(dev, sent)
    assert HOST_SECRET[:8] not in sent.getvalue()


def test_a_directory_swapped_for_a_link_is_not_walked_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, dev = dev_container_with_context(tmp_path)
    elsewhere = tmp_path / "host-dir"
    elsewhere.mkdir()
    for name in ("data.txt", "run.sh"):
        (elsewhere / name).write_bytes(HOST_SECRET)

    def to_link() -> None:
        (ws / "app").rename(tmp_path / "moved-app")
        (ws / "app").symlink_to(elsewhere)

    swap_before_opening(monkeypatch, "app", to_link)
    sent = io.BytesIO()
    with pytest.raises(ImageBuildError, match="changed while it was read"):
        _context_tar(dev, sent)
    assert HOST_SECRET[:8] not in sent.getvalue()


def test_a_file_swapped_for_a_fifo_is_refused_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, dev = dev_container_with_context(tmp_path)
    fifo = ws / "app/data.txt"

    def to_fifo() -> None:
        fifo.unlink()
        os.mkfifo(fifo)

    swap_before_opening(monkeypatch, "data.txt", to_fifo)
    outcome = without_waiting_on(fifo, lambda: _context_tar(dev, io.BytesIO()))
    assert isinstance(outcome, ImageBuildError), outcome
    assert "no longer a regular file" in str(outcome)


def test_a_dockerignore_swapped_for_a_fifo_after_its_check_is_refused_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, dev = dev_container_with_context(tmp_path)
    ignore = ws / ".dockerignore"

    def to_fifo() -> None:
        ignore.unlink()
        os.mkfifo(ignore)

    swap_before_opening(monkeypatch, ".dockerignore", to_fifo)
    outcome = without_waiting_on(ignore, lambda: _context_tar(dev, io.BytesIO()))
    assert isinstance(outcome, ConfigError), outcome
    assert ".dockerignore" in str(outcome) and "not a regular file" in str(outcome)


def test_the_dockerignore_is_read_from_the_opened_context_not_through_a_link_above_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox swaps the context directory for a link to a host directory while
    warden reads its .dockerignore (and back): the host's file must not be read (its
    patterns would show in what the image holds)."""
    ws = tmp_path / "ws"
    (ws / ".devcontainer").mkdir(parents=True)
    (ws / ".devcontainer/devcontainer.json").write_text(
        '{"build": {"dockerfile": "../ctx/Dockerfile", "context": "../ctx"}}'
    )
    (ws / "ctx").mkdir()
    (ws / "ctx/Dockerfile").write_text("FROM scratch\n")
    (ws / "ctx/data.txt").write_text("workspace data\n")
    (ws / "ctx/.dockerignore").write_text("*.log\n")
    (tmp_path / "host-dir").mkdir()
    (tmp_path / "host-dir/.dockerignore").write_text("data.txt\n")
    dev = find_devcontainer(ws)
    assert dev is not None
    real_open = os.open

    def racing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.basename(os.fspath(path)) != ".dockerignore":
            return real_open(path, flags, *args, **kwargs)
        (ws / "ctx").rename(tmp_path / "ctx-away")
        (ws / "ctx").symlink_to(tmp_path / "host-dir")
        try:
            return real_open(path, flags, *args, **kwargs)
        finally:
            (ws / "ctx").unlink()
            (tmp_path / "ctx-away").rename(ws / "ctx")

    monkeypatch.setattr(os, "open", racing_open)
    sent = io.BytesIO()
    _context_tar(dev, sent)
    sent.seek(0)
    with tarfile.open(fileobj=sent) as archive:
        assert "data.txt" in archive.getnames()




def test_a_huge_sparse_file_in_the_context_is_refused_before_it_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox's `truncate -s 1T app/big` costs it no disk; copying it into the
    context tar would fill the host's. It is refused before its bytes are read."""
    ws, dev = dev_container_with_context(tmp_path)
    monkeypatch.setattr(devcontext, "MAX_CONTEXT_BYTES", 1024 * 1024)
    with open(ws / "app/big", "wb") as big:
        big.truncate(64 * 1024 * 1024)
    sent = io.BytesIO()
    with pytest.raises(ConfigError, match=r"app/big in the build context .* add it to \.dockerignore"):
        _context_tar(dev, sent)
    assert len(sent.getvalue()) <= 1024 * 1024


def digest_of_the_tar(dev: DevContainer, sent: io.BytesIO) -> str:
    """The context hash as the tar itself says it, read back entry by entry (in name
    order: name, type, mode, link target, then the bytes)."""
    import hashlib

    dockerfile = ".devcontainer/Dockerfile"
    digest = hashlib.sha256(f"{devcontext.RECIPE}\ndockerfile {dockerfile}\n".encode())
    digest.update(f"args {sorted(dev.args)}\ntarget {dev.target}\n".encode())
    sent.seek(0)
    with tarfile.open(fileobj=sent) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            digest.update(
                f"{member.name}\0{member.type!r}\0{member.mode:o}\0{member.linkname}\0".encode(
                    "utf-8", "surrogateescape"
                )
            )
            content = archive.extractfile(member) if member.isfile() else None
            if content is not None:
                digest.update(content.read())
    return digest.hexdigest()


def test_the_hash_trust_records_is_the_hash_of_the_tar_the_engine_is_sent(
    tmp_path: Path,
) -> None:
    """The hash is taken as the tar is written (reading the inputs writes it into
    nothing); it must be the hash of the very entries and bytes the tar holds, for
    every kind of entry, so trust binds to what a build sends."""
    ws, dev = dev_container_with_context(tmp_path)
    (ws / "app/deeper/than/that").mkdir(parents=True)
    (ws / "app/deeper/than/that" / ("long-name-" * 12)).write_bytes(os.urandom(3000))
    (ws / "app/empty").write_bytes(b"")
    os.mkfifo(ws / "app/pipe")
    (ws / "app/naïve + ünïcode").write_text("a name beyond ASCII\n")
    (ws / os.fsdecode(b"app/not-utf8-\xff")).write_text("a name that is not UTF-8\n")
    (ws / "app/away").symlink_to("../../host-secret")
    sent = io.BytesIO()
    written = _context_tar(dev, sent)
    assert written == digest_of_the_tar(dev, sent)
    read = devcontext.read_build_context(dev)
    assert read.digest == written, "the read that makes no tar hashes what a build sends"
    assert read.dockerfile_bytes == b"FROM scratch\nCOPY app /app\n"
    assert "link:../../host-secret 777 app/away" in read.listing
    assert any(line.endswith(" app/not-utf8-\\xff") for line in read.listing), read.listing
    # and a build sends that tar only while the context is still what was read
    again = io.BytesIO()
    read.copy_to(again)
    assert again.getvalue() == sent.getvalue()
    (ws / "app/data.txt").write_text("changed after the read\n")
    changed = io.BytesIO()
    with pytest.raises(ImageBuildError, match="changed after warden read it"):
        read.copy_to(changed)
    assert changed.getvalue() == b"", "nothing of the changed context is left to send"
