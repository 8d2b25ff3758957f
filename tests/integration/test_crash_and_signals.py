"""Faults around a `warden run` process, injected for real: a SIGKILLed orchestrator's
containers stop by themselves and its runs read `interrupted`; cleanup on a shared
engine removes only provably dead owners' containers (two state dirs); SIGTERM stops
a run like Ctrl-C (exit 143, `stopped`, nothing left); a full or unwritable state dir
ends the run with one clear error and every task gets a final status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from orchestrator.exit_codes import ExitCode
from tests.conftest import UNPRIVILEGED, warden_argv, warden_env
from tests.integration.harness import PARENT_MATCH, task, text, tool

pytestmark = pytest.mark.integration

SELF_STOP_S = 15.0
"""How soon a dead orchestrator's containers must have stopped by themselves (the
runner reacts at once; the rest is the engine, on a machine shared and loaded)."""
START_S = 180.0
"""How long a run may take to reach its subagent's first tool call on a loaded machine."""
FINAL = {"completed", "failed", "timed_out", "stopped", "interrupted", "no_output"}


def napper_script(path: Path, marker: str) -> Path:
    """A parent that delegates one bash subagent which touches `marker` and sleeps."""
    script = {
        "conversations": [
            {"name": "parent", "match": PARENT_MATCH, "turns": [{"content": [task("NAPPER")]}]},
            {
                "name": "napper",
                "match": {"prompt_contains": "NAPPER"},
                "turns": [
                    {
                        "content": [
                            tool("Bash", command=f"touch {marker}; sleep 300", timeout=600000)
                        ]
                    }
                ],
            },
        ]
    }
    path.write_text(yaml.safe_dump(script))
    return path


def new_workspace(path: Path) -> Path:
    path.mkdir()
    os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
    return path


def start_run(state: Path, workspace: Path, script: Path) -> subprocess.Popen[str]:
    argv = warden_argv(
        "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions",
    )  # fmt: skip
    return subprocess.Popen(
        argv,
        env=warden_env(WARDEN_STATE_DIR=str(state), CI="true"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = START_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        if time.monotonic() > deadline:
            proc.terminate()
            try:
                said = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                said = proc.communicate()
            raise AssertionError(f"{path.name} never appeared: {said}")
        time.sleep(0.1)


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        warden_argv(*args), env=warden_env(WARDEN_STATE_DIR=str(state), CI="true"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def ps(state: Path) -> list[dict[str, Any]]:
    proc = cli(state, "ps", "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    runs: list[dict[str, Any]] = json.loads(proc.stdout)
    return runs


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.from_env()
    yield client
    client.close()


def of_run(engine: Any, run_id: str, running_only: bool = False) -> list[Any]:
    return list(
        engine.containers.list(
            ignore_removed=True, all=not running_only, filters={"label": f"warden.run={run_id}"}
        )
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_dead_owner_stops_by_itself_cleanup_spares_live_runs_and_sigterm_stops(
    tmp_path: Path, engine: Any, procs: list[subprocess.Popen[str]]
) -> None:
    state_a, state_b, state_c = (tmp_path / n for n in ("state-a", "state-b", "state-c"))
    ws_a, ws_b = new_workspace(tmp_path / "ws-a"), new_workspace(tmp_path / "ws-b")
    live = start_run(state_a, ws_a, napper_script(tmp_path / "a.yaml", "nap-a"))
    doomed = start_run(state_b, ws_b, napper_script(tmp_path / "b.yaml", "nap-b"))
    procs += [live, doomed]
    wait_for(ws_a / "nap-a", live)
    wait_for(ws_b / "nap-b", doomed)
    (run_a,) = ps(state_a)
    (run_b,) = ps(state_b)
    assert run_a["status"] == run_b["status"] == "running"
    assert of_run(engine, run_b["run_id"], running_only=True)

    # 2: SIGKILL the orchestrator: its containers (task and warm ones) stop by themselves.
    killed_at = time.monotonic()
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=10)
    while of_run(engine, run_b["run_id"], running_only=True):
        assert time.monotonic() - killed_at < SELF_STOP_S, "containers outlived their owner"
        time.sleep(0.2)
    stopped_after = time.monotonic() - killed_at
    assert of_run(engine, run_b["run_id"]), "nothing removed them: they stopped themselves"
    (after_b,) = ps(state_b)  # any command that reads the store notices the dead owner
    assert after_b["status"] == "interrupted"
    assert [t["status"] for t in after_b["tasks"]] == ["interrupted"]
    assert of_run(engine, run_b["run_id"]) == [], "ps left the dead run's containers"

    # 1: cleanup against state dir B, then a bare one, keep A's live run...
    cleaned = cli(state_b, "cleanup", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    assert json.loads(cleaned.stdout)["removed"] == 0  # ps removed them already
    assert of_run(engine, run_b["run_id"]) == []
    assert cli(state_c, "cleanup").returncode == 0
    assert of_run(engine, run_a["run_id"], running_only=True), "cleanup removed a live run"
    assert ps(state_a)[0]["status"] == "running"
    # ... and --all without a terminal names what it would remove and refuses.
    refused = cli(state_c, "cleanup", "--all", "--session", run_a["run_id"])
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert run_a["run_id"] in refused.stderr or "owner pid" in refused.stderr
    assert of_run(engine, run_a["run_id"], running_only=True)

    # 3: SIGTERM (what `timeout`, CI and systemd send) stops the run like Ctrl-C.
    began = time.monotonic()
    live.send_signal(signal.SIGTERM)
    _, err = live.communicate(timeout=60)
    assert live.returncode == 143, err
    assert "interrupted: stopped 1 subagent(s)" in err and "Traceback" not in err
    (final_a,) = ps(state_a)
    assert final_a["status"] == "stopped"
    assert [t["status"] for t in final_a["tasks"]] == ["stopped"]
    assert of_run(engine, run_a["run_id"]) == []
    print(f"self-stop after SIGKILL: {stopped_after:.1f} s; SIGTERM stop: "
          f"{time.monotonic() - began:.1f} s")  # fmt: skip


def test_cleanup_counts_the_containers_its_recovery_step_removed(
    tmp_path: Path, engine: Any, procs: list[subprocess.Popen[str]]
) -> None:
    state = tmp_path / "state"
    ws = new_workspace(tmp_path / "ws")
    doomed = start_run(state, ws, napper_script(tmp_path / "d.yaml", "nap-d"))
    procs.append(doomed)
    wait_for(ws / "nap-d", doomed)
    (run,) = ps(state)
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=10)
    killed_at = time.monotonic()
    while of_run(engine, run["run_id"], running_only=True):
        assert time.monotonic() - killed_at < SELF_STOP_S
        time.sleep(0.2)
    left = len(of_run(engine, run["run_id"]))
    assert left >= 1  # stopped, not removed: the store has not noticed the death yet
    cleaned = cli(state, "cleanup", "--json")  # the first command after the crash
    assert cleaned.returncode == 0, cleaned.stderr
    report = json.loads(cleaned.stdout)
    assert report["removed"] == left == report["removed_with_crashed_runs"]
    assert of_run(engine, run["run_id"]) == []


def test_sighup_stops_a_run_with_129(
    tmp_path: Path, engine: Any, procs: list[subprocess.Popen[str]]
) -> None:
    state, ws = tmp_path / "state", new_workspace(tmp_path / "ws")
    proc = start_run(state, ws, napper_script(tmp_path / "s.yaml", "nap"))
    procs.append(proc)
    wait_for(ws / "nap", proc)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, err
    (run,) = ps(state)
    assert run["status"] == "stopped" and of_run(engine, run["run_id"]) == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs for the state dir (the test runs as root, like CI)."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_full_state_disk_is_one_clear_error_and_every_task_ends(
    tmp_path: Path, small_disk: Path, engine: Any, procs: list[subprocess.Popen[str]]
) -> None:
    state, ws = small_disk / "state", new_workspace(tmp_path / "ws")
    steps = [tool("Bash", command="touch started; sleep 2")]
    steps += [tool("Bash", command=f"echo step {i}") for i in range(5)]
    script = {
        "conversations": [
            {"name": "parent", "match": PARENT_MATCH, "turns": [{"content": [task("DISKY")]}]},
            {
                "name": "disky",
                "match": {"prompt_contains": "DISKY"},
                "turns": [*({"content": [s]} for s in steps), {"content": [text("done")]}],
            },
        ]
    }
    script_path = tmp_path / "disk.yaml"
    script_path.write_text(yaml.safe_dump(script))
    proc = start_run(state, ws, script_path)
    procs.append(proc)
    wait_for(ws / "started", proc)
    filler = fill(small_disk)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.RUN_ERROR, err
    assert "Traceback" not in err and "broker bug" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("warden: error:")]
    assert len(errors) == 1, err
    assert "No space left on device" in errors[0] or "disk is full" in errors[0]
    assert "free" in errors[0]
    filler.unlink()
    (run,) = ps(state)
    assert run["status"] in FINAL
    assert run["tasks"] and all(t["status"] in FINAL for t in run["tasks"]), run["tasks"]
    assert of_run(engine, run["run_id"]) == []


def test_unwritable_event_log_is_one_clear_error_before_anything_starts(
    tmp_path: Path, engine: Any
) -> None:
    state, ws = tmp_path / "state", new_workspace(tmp_path / "ws")
    state.mkdir()
    (state / "runs").write_text("not a directory")  # root ignores chmod; this it cannot write
    proc = start_run(state, ws, napper_script(tmp_path / "s.yaml", "nap"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.RUN_ERROR, err
    errors = [line for line in err.splitlines() if line.startswith("warden: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith("warden: error: cannot write the run's event log"), err
    assert ps(state) == []  # no run was recorded, so none is left `running`


def three_nappers_script(path: Path) -> Path:
    """A parent that starts three bash subagents in one turn; each touches its marker
    and sleeps."""
    nappers = [
        {
            "name": f"napper{i}",
            "match": {"prompt_contains": f"NAPPER{i} "},
            "turns": [
                {"content": [tool("Bash", command=f"touch nap{i}; sleep 300", timeout=600000)]}
            ],
        }
        for i in range(3)
    ]
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [{"content": [task(f"NAPPER{i} go") for i in range(3)]}],
    }
    path.write_text(yaml.safe_dump({"conversations": [parent, *nappers]}))
    return path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_with_three_subagents_running_records_every_end(
    tmp_path: Path, engine: Any, procs: list[subprocess.Popen[str]], sig: int
) -> None:
    """Every subagent's end is recorded before the store closes: the message, the
    result document and the store say the same three tasks were stopped."""
    state, ws = tmp_path / "state", new_workspace(tmp_path / "ws")
    argv = warden_argv(
        "run", "go", "--replay", str(three_nappers_script(tmp_path / "s.yaml")),
        "--workspace", str(ws), "--permission-mode", "bypassPermissions", "--json",
    )  # fmt: skip
    proc = subprocess.Popen(
        argv,
        env=warden_env(WARDEN_STATE_DIR=str(state), CI="true"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    for i in range(3):
        wait_for(ws / f"nap{i}", proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "could not record" not in err, err
    assert "interrupted: stopped 3 subagent(s)" in err, err
    document = json.loads(out.splitlines()[-1])
    assert document["type"] == "result" and document["status"] == "stopped"
    assert sorted(t["status"] for t in document["tasks"]) == ["stopped"] * 3, document
    (run,) = ps(state)
    assert run["status"] == "stopped"
    assert sorted(t["status"] for t in run["tasks"]) == ["stopped"] * 3, run
    assert of_run(engine, run["run_id"]) == []
