"""`warden mcp` killed the way Claude Code ends a stdio MCP server (by its pid:
SIGINT, SIGTERM 100 ms later, SIGKILL 400 ms after that, then its pipes closed),
while four Tasks' sandboxes are running, on a machine kept busy: the session still
ends whole. The tasks are stopped, no container of the session is left, the result
document and the audit are complete, and no process of the session outlives it.

Before the session had a process of its own, the kill cut its end short (no result
document, containers left) whenever that end took longer than half a second: at
this load, most runs."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import REPO_ROOT, warden_argv, warden_env
from tests.integration.harness import containers_of, hold_command, text, tool
from tests.integration.session_procs import busy_machine, wait_until_ended

pytestmark = pytest.mark.integration

API_KEY = "sk-ant-mcp-killed-test-key"
MARKS = tuple(f"held-by-task-{n}" for n in "abcd")
BUSY_LOOPS = 8
"""Busy loops beside the session (four per core): a machine as loaded as the ones
where Claude Code's kill was seen cutting the session's end short."""
CLAUDE_CODE_KILL = ((signal.SIGINT, 0.1), (signal.SIGTERM, 0.4), (signal.SIGKILL, 0.0))
"""The signals Claude Code (2.1.197) sends a stdio MCP server's pid as it closes, each
with the time it waits before the next: replayed as it does them, not a wait."""

SCRIPT = Script.model_validate(
    {
        "conversations": [
            {
                "name": mark,
                "match": {"prompt_contains": mark},
                "turns": [
                    {"content": [tool("Bash", command=hold_command(mark))]},
                    {"content": [text("released")]},
                ],
            }
            for mark in MARKS
        ]
    }
)


def message(payload: dict[str, Any]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", **payload}) + "\n").encode()


def wait_for(path: Path, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, f"warden mcp exited ({proc.returncode}) before {path.name}"
        assert time.monotonic() < deadline, f"{path.name} was not made in {timeout_s:g} s"
        time.sleep(0.05)


def task_call(request_id: int, mark: str) -> bytes:
    arguments = {"description": "hold", "prompt": f"hold: {mark}", "subagent_type": "bash"}
    return message(
        {
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "Task", "arguments": arguments},
        }
    )


def test_a_session_claude_code_kills_mid_task_still_ends_whole(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    results, audit, stderr = tmp_path / "result.json", tmp_path / "audit.json", tmp_path / "err"
    argv = warden_argv("mcp", "--workspace", str(workspace), "--trust-workspace",
                       "--permission-mode", "bypassPermissions",
                       "--result-file", str(results), "--audit-out", str(audit))  # fmt: skip
    with (
        ScriptedModelServer(SCRIPT, expected_api_key=API_KEY).in_thread() as server,
        busy_machine(BUSY_LOOPS),
        stderr.open("wb") as errors,
    ):
        env = warden_env(
            ANTHROPIC_BASE_URL=server.base_url,
            ANTHROPIC_API_KEY=API_KEY,
            WARDEN_STATE_DIR=str(settings.state_dir),
            WARDEN_CONFIG_DIR=str(settings.config_dir),
            CLAUDE_CONFIG_DIR=str(settings.claude_dir),
        )
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env,
            cwd=REPO_ROOT,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(
                message({"id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "claude-code", "version": "2.1.197"}}})
                + message({"method": "notifications/initialized"})
                + b"".join(task_call(n, mark) for n, mark in enumerate(MARKS, 2))
            )  # fmt: skip
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == 1
            for mark in MARKS:  # each task's sandbox is running its command
                wait_for(workspace / mark, proc)
            for signum, pause in CLAUDE_CODE_KILL:
                if proc.poll() is None:
                    proc.send_signal(signum)
                time.sleep(pause)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdin.close()  # Claude Code closes the pipes last
            proc.stdout.close()
        # The session's end is not the killed process's: wait for the session itself.
        wait_until_ended(settings.state_dir)
    said = stderr.read_text(errors="replace")
    assert results.exists(), f"no result document; stderr:\n{said[-3000:]}"
    doc = json.loads(results.read_text())
    assert doc["type"] == "result" and doc["run_id"], doc
    assert [t["status"] for t in doc["tasks"]] == ["stopped"] * len(MARKS), doc["tasks"]
    assert containers_of(doc["run_id"]) == []
    decisions = json.loads(audit.read_text())
    assert sorted(
        (d["tool_name"], d["decision"], d["tool_input"]["command"]) for d in decisions
    ) == [("Bash", "allow", hold_command(mark)) for mark in MARKS], decisions
    assert "the stop took longer" not in said and "Traceback" not in said, said[-3000:]
