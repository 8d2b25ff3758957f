"""Locks in the README's main job end to end: the offline demo run through the
`warden` CLI against the real engine, as a newcomer types it, leaves the work the
subagents did, the denied clean-up undone, an audit trail, a finished run in
`warden ps`, and no container behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, UNPRIVILEGED, warden_argv, warden_env

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

DEMO_SCRIPT = REPO_ROOT / "orchestrator" / "demo" / "demo.yaml"
DEMO_WORKSPACE = REPO_ROOT / "orchestrator" / "demo" / "workspace"
DEMO_TIMEOUT_S = 300


def _chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)


@pytest.fixture
def demo_workspace(tmp_path: Path) -> Path:
    """A fresh copy of the sample project, owned as `.ci/setup` leaves it."""
    ws = tmp_path / "demo-workspace"
    shutil.copytree(DEMO_WORKSPACE, ws)
    if os.geteuid() == 0:
        _chown_tree(ws, UNPRIVILEGED)
    return ws


def _warden(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        warden_argv(*args),
        capture_output=True,
        text=True,
        env=warden_env(WARDEN_STATE_DIR=str(state), CI="true"),
        stdin=subprocess.DEVNULL,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )


def test_the_readme_demo_runs_end_to_end(demo_workspace: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = _warden(
        state,
        "run",
        "--replay",
        str(DEMO_SCRIPT),
        "--workspace",
        str(demo_workspace),
        "--trust-workspace",
        "--json",
        "Survey the sample project",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["type"] == "result" and result["status"] == "completed"
    assert sorted(t["status"] for t in result["tasks"]) == ["completed", "completed"]

    # The general-purpose subagent's work persists in the shared workspace ...
    summary = (demo_workspace / "SUMMARY.md").read_text()
    assert "total_value" in summary and "low_stock" in summary
    # ... the bash subagent found the root read-only and ran as the workspace owner ...
    assert "Read-only file system" in result["result"]
    assert (
        f"running as uid {UNPRIVILEGED if os.geteuid() == 0 else os.geteuid()}" in result["result"]
    )
    # ... and its `rm -rf /workspace/*` was denied by the workspace policy, so nothing
    # was deleted.
    assert (demo_workspace / "inventory.py").is_file()
    assert (demo_workspace / "test_inventory.py").is_file()

    audit = _warden(state, "audit", "--json")
    assert audit.returncode == 0, audit.stderr
    decisions = {
        (entry["tool_name"], entry["tool_input"].get("command", ""), entry["final"])
        for entry in json.loads(audit.stdout)
    }
    assert ("Bash", "rm -rf /workspace/*", "deny") in decisions

    ps = _warden(state, "ps", "--json")
    assert ps.returncode == 0, ps.stderr
    runs = json.loads(ps.stdout)
    assert [run["status"] for run in runs if run["run_id"] == result["run_id"]] == ["completed"]

    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=warden.run={result['run_id']}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert left.stdout.strip() == ""
