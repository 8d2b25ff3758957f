"""A workspace renamed or deleted while a run uses it: the run notices (it holds the
workspace by a descriptor), stops its sandboxes and ends with one clear error and a
non-zero exit, naming where the workspace went, so what a subagent wrote there is
not lost without a word; the disk watcher keeps measuring through its own
descriptor and prints no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.exit_codes import ExitCode
from tests.conftest import UNPRIVILEGED, warden_argv, warden_env
from tests.integration.harness import PARENT_MATCH, containers_of, task, text, tool

pytestmark = pytest.mark.integration

START_S = 180.0
"""A hang guard: how long the subagent may take to reach its tool on a loaded machine."""


def script(path: Path) -> Path:
    writer = {
        "name": "writer",
        "match": {"prompt_contains": "WRITER"},
        "turns": [
            {
                "content": [
                    tool(
                        "Bash",
                        command="echo before > before.txt; sleep 300",
                        timeout=600000,
                    )
                ]
            },
            {"content": [text("never")]},
        ],
    }
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [{"content": [task("WRITER go", "bash")]}, {"content": [text("never")]}],
    }
    path.write_text(yaml.safe_dump({"conversations": [parent, writer]}))
    return path


@pytest.mark.parametrize("fate", ["renamed", "deleted"])
def test_a_workspace_that_vanishes_stops_the_run_with_one_clear_error(
    tmp_path: Path, fate: str
) -> None:
    state, ws = tmp_path / "state", tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, UNPRIVILEGED, UNPRIVILEGED)
    argv = warden_argv(
        "run", "go", "--replay", str(script(tmp_path / "s.yaml")), "--workspace", str(ws),
        "--permission-mode", "bypassPermissions", "--json", "--disk-free-floor", "1m",
    )  # fmt: skip
    proc = subprocess.Popen(
        argv,
        env=warden_env(WARDEN_STATE_DIR=str(state), CI="true"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_S
        while not (ws / "before.txt").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the subagent never wrote"
            time.sleep(0.1)
        moved = tmp_path / "moved"
        if fate == "renamed":
            ws.rename(moved)
        else:
            shutil.rmtree(ws)
        out, err = proc.communicate(timeout=START_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == ExitCode.RUN_ERROR, err
    assert "Traceback" not in err and "FileNotFoundError" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("warden: error: the workspace")]
    assert str(ws) in line and "stopped its sandboxes" in line
    if fate == "renamed":
        assert f"was moved to {moved}; what the subagents wrote is there" in line
        assert (moved / "before.txt").read_text() == "before\n"  # nothing lost
    else:
        assert "was deleted" in line
    document = json.loads(out.splitlines()[-1])
    assert document["status"] == "failed"
    assert [t["status"] for t in document["tasks"]] == ["stopped"], document
    assert containers_of(document["run_id"]) == []
