"""`warden ps` and `warden audit` piped into another program (no terminal): one line
per task or call, never wrapped at 80 columns, tool inputs as JSON (not Python
reprs), and `audit --task/--decision/--tool` select exactly those calls (`--task`
alone reads that task's run, not the latest)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Literal

import pytest

from orchestrator.behavior import Behavior
from orchestrator.jsontypes import JSONObject
from orchestrator.store import AuditRecord, Store, TaskRecord
from tests.conftest import warden_argv, warden_env

LONG = "a description long enough that an 80-column terminal would have to wrap it twice"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state_dir = tmp_path / "state"
    with Store.open(state_dir / "warden.db") as store:
        for run in ("run_old", "run_new"):
            store.create_run(run, prompt="p", workspace="/ws", model="m", pid=os.getpid())
        for task_id, run in (("sa_old", "run_old"), ("sa_new", "run_new")):
            store.create_task(
                TaskRecord(
                    task_id=task_id, run_id=run, agent_type="bash", description=LONG, prompt="p"
                )
            )
        calls: list[tuple[str, str, str, JSONObject, Behavior, Literal["allow", "deny"]]] = [
            ("sa_old", "run_old", "Bash", {"command": "rm -rf 'build dir'"}, "ask", "deny"),
            ("sa_old", "run_old", "Read", {"file_path": "/workspace/a.py"}, "allow", "allow"),
            ("sa_new", "run_new", "Bash", {"command": "true"}, "allow", "allow"),
        ]
        for task_id, run, tool, tool_input, decision, final in calls:
            store.record_audit(
                AuditRecord(
                    run_id=run,
                    task_id=task_id,
                    agent_type="bash",
                    tool_name=tool,
                    input_hash="h",
                    tool_input=tool_input,
                    decision=decision,
                    final=final,
                    decided_by="rule: x",
                    source="cli",
                )
            )
    return state_dir


def piped(state: Path, *args: str) -> str:
    env = warden_env(WARDEN_STATE_DIR=str(state))
    env.pop("COLUMNS", None)
    done = subprocess.run(
        warden_argv(*args), env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def test_ps_keeps_each_task_on_one_line(state: Path) -> None:
    lines = piped(state, "ps").splitlines()
    (old,) = [line for line in lines if "sa_old" in line]
    assert LONG[:40] in old and len(old) > 80
    assert "\x1b" not in "".join(lines)  # no colour codes into a pipe


def test_audit_rows_are_whole_lines_with_json_inputs_and_filters(state: Path) -> None:
    shown = piped(state, "audit", "run_old")
    (row,) = [line for line in shown.splitlines() if "rm -rf" in line]
    assert '{"command": "rm -rf \'build dir\'"}' in row  # JSON, whole, on one line
    assert "{'command'" not in shown
    denied = piped(state, "audit", "--task", "sa_old", "--decision", "deny", "--json")
    assert [r["tool_name"] for r in json.loads(denied)] == ["Bash"]
    reads = piped(state, "audit", "--task", "sa_old", "--tool", "Read", "--json")
    assert [r["tool_input"] for r in json.loads(reads)] == [{"file_path": "/workspace/a.py"}]
    asked = piped(state, "audit", "run_old", "--decision", "ask", "--json")
    assert [r["final"] for r in json.loads(asked)] == ["deny"]
    latest = piped(state, "audit", "--json")
    assert [r["task_id"] for r in json.loads(latest)] == ["sa_new"]
