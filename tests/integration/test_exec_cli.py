"""Locks in `warden exec` and `warden cleanup` as a user drives them: exit statuses,
pass-through output, the one JSON object, usage errors, Ctrl-C/SIGTERM killing and
removing the container, and cleanup of orphans by label."""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator import labels as wl
from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from tests.conftest import warden_argv, warden_env
from tests.integration.sandbox_fixtures import (  # noqa: F401
    TEST_LABEL,
    docker_client,
    label_args,
    no_leftovers,
    sandbox_image,
)

pytestmark = pytest.mark.integration

HANG_GUARD_S = 120.0
"""Only a guard against a hang: a loaded CI runner may take its time, never this long."""


def cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        warden_argv(*args), capture_output=True, text=True, env=warden_env(),
        timeout=timeout_s, check=False,
    )  # fmt: skip


def exec_args(workspace: Path, image: str, labels: dict[str, str]) -> list[str]:
    return ["exec", "--workspace", str(workspace), "--image", image, *label_args(labels)]


def test_exit_status_and_output_pass_through(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    proc = cli(*exec_args(workspace, sandbox_image, no_leftovers), "--",
               "sh", "-c", "echo out; echo err >&2; exit 7")  # fmt: skip
    assert proc.returncode == 7
    assert proc.stdout == "out\n"
    assert proc.stderr == "err\nwarden: command exited with status 7\n"
    ok = cli(*exec_args(workspace, sandbox_image, no_leftovers), "--", "echo", "fine")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "fine\n", "")


def test_large_output_arrives_whole_through_a_pipe(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    """`warden exec` ends without the interpreter's teardown (`cli.FAST_EXIT_COMMANDS`):
    everything written must still reach a pipe, past the pipe's own buffer."""
    proc = cli(*exec_args(workspace, sandbox_image, no_leftovers), "--",
               "sh", "-c", "head -c 900000 /dev/zero | tr '\\0' x; echo; echo done >&2; exit 5")  # fmt: skip
    assert proc.returncode == 5
    assert proc.stdout == "x" * 900_000 + "\n"
    assert proc.stderr.startswith("done\n")


def test_json_is_exactly_one_object(workspace: Path, sandbox_image: str, no_leftovers: Any) -> None:
    proc = cli(*exec_args(workspace, sandbox_image, no_leftovers), "--json", "--",
               "sh", "-c", "printf 'a\\nb'; exit 3")  # fmt: skip
    assert proc.returncode == 3 and proc.stderr == ""
    out = json.loads(proc.stdout)
    assert set(out) == {"status", "exit_code", "stdout", "stderr", "truncated", "duration_s"}
    assert out["status"] == "error" and out["exit_code"] == 3 and out["stdout"] == "a\nb"


def test_limits_reach_the_container(workspace: Path, sandbox_image: str, no_leftovers: Any) -> None:
    script = (
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max "
        "2>/dev/null || cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max"
    )
    proc = cli(*exec_args(workspace, sandbox_image, no_leftovers),
               "--memory", "96m", "--pids", "48", "--", "sh", "-c", script)  # fmt: skip
    assert proc.stdout.split() == [str(96 * 1024 * 1024), "48"]


@pytest.mark.parametrize(
    "flags",
    [["--memory", "lots"], ["--memory", "1m"], ["--cpus", "0"], ["--pids", "2"],
     ["--timeout", "-1"], ["--label", "warden.session=x"], ["--user", "root"], []],
)  # fmt: skip
def test_bad_flags_are_usage_errors(flags: list[str]) -> None:
    proc = cli("exec", *flags, *(["--", "true"] if flags else []))
    assert proc.returncode == 2 and "Usage:" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_kills_and_removes(
    workspace: Path, sandbox_image: str, no_leftovers: Any, docker_client: Any, sig: int
) -> None:
    mark = {**no_leftovers, "warden-test.case": f"interrupt-{int(sig)}"}
    selector = [f"{k}={v}" for k, v in mark.items()]
    proc = subprocess.Popen(
        warden_argv(*exec_args(workspace, sandbox_image, mark), "--", "sleep", "600"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warden_env(),
    )  # fmt: skip
    deadline = time.monotonic() + HANG_GUARD_S
    while not docker_client.api.containers(filters={"label": selector}):
        assert time.monotonic() < deadline and proc.poll() is None, "container never started"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 128 + sig, err  # 130, 143, 129: the shell's convention
    assert "interrupted" in err and "Traceback" not in err
    assert docker_client.api.containers(all=True, filters={"label": selector}) == []


def test_cleanup_removes_orphans_of_a_session(
    settings: Settings, sandbox_image: str, no_leftovers: Any, docker_client: Any,
    test_session: str,
) -> None:  # fmt: skip
    from orchestrator import owner

    backend = DockerBackend(
        docker_client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    child = subprocess.Popen(["sleep", "0"])  # their owner: a process that has exited
    start = owner.process_start(child.pid) or 1
    child.wait()
    dead = owner.Owner(owner.host_id(), owner.boot_id(), child.pid, start, "st_gone")
    spec = SandboxSpec(
        image=sandbox_image, command=["sleep", "600"], labels=no_leftovers,
        warden_labels={**wl.warden_labels(test_session, task="orphan"), **dead.labels()},
    )  # fmt: skip
    ids = [backend.start(spec) for _ in range(2)]  # never waited on: orphans, as after a crash
    live = backend.start(replace(spec, warden_labels=wl.warden_labels(test_session)))
    proc = cli("cleanup", "--session", test_session, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["removed"] == 2
    assert [c.id for c in backend.list({wl.SESSION: test_session})] == [live]  # owner alive
    again = cli("cleanup", "--session", test_session)
    assert again.stdout.startswith("removed 0 warden containers\nkept 1 container(s)")
    backend.remove(live)
    for container_id in ids:
        backend.remove(container_id)  # already gone: fine; closes our output readers
    assert TEST_LABEL in no_leftovers


def test_dead_engine_is_one_clear_line(tmp_path: Path) -> None:
    for args in (["exec", "--", "true"], ["cleanup"]):
        proc = subprocess.run(
            warden_argv(*args), capture_output=True, text=True, check=False,
            env=warden_env(DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock"),
        )  # fmt: skip
        assert proc.returncode in (2, 125)
        assert "Traceback" not in proc.stderr
        # An absent socket on a machine with dockerd: the engine is not running.
        assert proc.stderr.startswith("warden: error: the Docker engine is installed but not running")
        assert f"no answer on {tmp_path}/no-engine.sock" in proc.stderr
        assert "warden doctor --fix" in proc.stderr


def test_a_remembered_image_that_is_gone_is_looked_up_again(
    settings: Settings, workspace: Path, sandbox_image: str, no_leftovers: Any, docker_client: Any
) -> None:
    """`warden exec` runs warden's image by the id its state directory last confirmed,
    without asking the engine first. When that image is gone (here: an id no image has),
    the create's 404 sends exec back to the lookup: the command still runs, in the
    current image, and the hint names that image again."""
    from orchestrator.images import KINDS
    from orchestrator.images.hashing import inputs_hash
    from orchestrator.images.hints import HINTS_FILE

    settings.state_dir.mkdir(parents=True)
    hints = settings.state_dir / HINTS_FILE
    kind = KINDS["bash"]
    gone = "sha256:" + "0" * 64
    hints.write_text(json.dumps({"bash": {"inputs": inputs_hash(kind), "tag": sandbox_image,
                                          "id": gone}}))  # fmt: skip
    proc = subprocess.run(
        warden_argv("exec", "--workspace", str(workspace), "--image", "bash",
                    *label_args(no_leftovers), "--", "sh", "-c", "echo ran"),
        capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
        env=warden_env(WARDEN_STATE_DIR=str(settings.state_dir)),
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "ran\n"), proc.stderr
    current = docker_client.images.get(sandbox_image).id
    assert json.loads(hints.read_text())["bash"]["id"] == current
