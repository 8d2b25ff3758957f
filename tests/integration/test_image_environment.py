"""Locks in that a project image's environment never acts on warden's own process:
an image whose `ENV` sets `LD_PRELOAD` (a real library, compiled here, that records
every process it is loaded into), `LD_LIBRARY_PATH`, `PYTHON*`, `BASH_ENV` and `ENV`
leaves the runner (and `warden exec`'s seal shim) untouched; they start with those
keys empty, while the commands the Bash tool runs keep the image's environment.
Real engine, real image, real anthropic SDK; only the model is scripted."""

from __future__ import annotations

import io
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.images.runtime import RUNTIME_TARGET
from tests.conftest import REPO_ROOT, warden_argv, warden_env
from tests.integration.harness import scripted_run
from tests.integration.project_fixtures import (
    cc_image,
    chown_tree,
    engine,
    project_workspace,
    throwaway_images,
)
from tests.integration.test_project_images import delegate

pytestmark = pytest.mark.integration
__all__ = ["cc_image", "engine", "throwaway_images"]

HOOK_C = r"""
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void record(void) {
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 2);
    if (n < 0) n = 0;
    exe[n++] = '\n';
    int fd = open("/workspace/preload-marks", O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd >= 0) { write(fd, exe, n); close(fd); }
}
"""
IMAGE_ENV = {
    "LD_PRELOAD": "/workspace/hook.so",
    "LD_LIBRARY_PATH": "/workspace/libs",
    "PYTHONPATH": "/workspace/evil",
    "PYTHONSTARTUP": "/workspace/evil/startup.py",
    "PYTHONHOME": "/workspace/evil",
    "BASH_ENV": "/workspace/bash-env",
    "ENV": "/workspace/sh-env",
    "PROJECT_MARKER": "from-the-image",
}
SHOWN = ("LD_PRELOAD", "PYTHONPATH", "PROJECT_MARKER")
"""(BASH_ENV is warden's own for the Bash tool's shell: `sandbox_tools.oom`.)"""


@pytest.fixture
def preload_image(engine: Any, cc_image: str, throwaway_images: dict[str, str]) -> str:
    tag = f"warden-test-preload:{uuid.uuid4().hex[:12]}"
    env = "".join(f"ENV {key}={value}\n" for key, value in IMAGE_ENV.items())
    text = f"FROM {cc_image}\n{env}".encode()
    engine.images.build(fileobj=io.BytesIO(text), tag=tag, labels=throwaway_images, rm=True)
    return tag


def with_hook(workspace: Path, tmp_path: Path) -> Path:
    """The workspace, with hook.so compiled by this machine's gcc (Debian bookworm,
    the same C library as the test images) and an executable BASH_ENV script."""
    source = tmp_path / "hook.c"
    source.write_text(HOOK_C)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(workspace / "hook.so"), str(source)], check=True
    )
    (workspace / "bash-env").write_text("echo BASH_ENV-ran >> /workspace/preload-marks\n")
    project_workspace(workspace)
    chown_tree(workspace)
    return workspace / "preload-marks"


def marks(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_the_image_s_ld_preload_never_reaches_the_runner_but_reaches_its_commands(
    settings: Settings, workspace: Path, tmp_path: Path, preload_image: str
) -> None:
    marked = with_hook(workspace, tmp_path)
    runner_env = (
        "tr '\\0' '\\n' < /proc/$PPID/environ | grep -E '^(LD_|PYTHON|BASH_ENV=|ENV=)' "
        "| sed 's/^/runner:/'"
    )
    tools = "; ".join(f"echo tool:{key}=${key}" for key in SHOWN)
    script = delegate(runner_env, tools)
    async with scripted_run(settings, workspace, script, image=preload_image) as (run, _):
        result = await run.parent.run("what does the runner see?")
    lines = result.text.splitlines()
    # The runner (the Bash tool's parent) started with each of the image's keys empty.
    started = {line.split(":", 1)[1] for line in lines if line.startswith("runner:")}
    assert "PYTHONPATH=" in started and "LD_LIBRARY_PATH=" in started, result.text
    assert not any(line.partition("=")[2] for line in started if not line.startswith("WARDEN_")), (
        started
    )
    # The commands it runs have the image's environment.
    for key in SHOWN:
        assert f"tool:{key}={IMAGE_ENV[key]}" in lines, result.text
    # The library was loaded into the image's programs (so it works), never into
    # warden's runtime (its loader is the runner's /proc/self/exe).
    found = marks(marked)
    assert any(mark.endswith("/bash") for mark in found), found
    assert not any(mark.startswith(RUNTIME_TARGET) for mark in found), found


def test_warden_exec_s_seal_shim_is_not_preloaded_and_the_command_keeps_the_env(
    workspace: Path, tmp_path: Path, preload_image: str, engine: Any
) -> None:
    marked = with_hook(workspace, tmp_path)
    done = subprocess.run(
        warden_argv(
            "exec", "--workspace", str(workspace), "--image", preload_image, "--",
            "sh", "-c", "echo command:$LD_PRELOAD:$PROJECT_MARKER",
        ),
        capture_output=True, text=True, env=warden_env(), cwd=REPO_ROOT, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "command:/workspace/hook.so:from-the-image" in done.stdout
    found = marks(marked)
    assert any(mark.endswith("/dash") or mark.endswith("/sh") for mark in found), found
    assert not any(mark.startswith(RUNTIME_TARGET) for mark in found), found
