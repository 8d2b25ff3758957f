"""The library API's example (examples/embed.py) runs as a user would run it: a
subagent writes a workspace file from its sandbox after the program's callback
allowed its question, a background task's call is denied by the callback and it
says so, an unknown type is refused, and the run's audit records who answered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import REPO_ROOT, warden_env
from tests.integration.harness import containers_of, text, tool

pytestmark = pytest.mark.integration

API_KEY = "sk-ant-example-key"
SCRIPT = Script.model_validate(
    {
        "conversations": [
            {
                "name": "note",
                "match": {"prompt_contains": "Write hello into note.txt"},
                "turns": [
                    {"content": [tool("Bash", command="echo hello > note.txt")]},
                    {"content": [text("done")]},
                ],
            },
            {
                "name": "list",
                "match": {"prompt_contains": "List the files"},
                "turns": [
                    {"content": [tool("Bash", command="ls")]},
                    {"content": [text("I was not allowed to list them")]},
                ],
            },
        ]
    }
)


def test_the_embedding_example_runs(settings: Settings, workspace: Path) -> None:
    with ScriptedModelServer(SCRIPT, expected_api_key=API_KEY).in_thread() as server:
        proc = subprocess.run(
            [sys.executable, str(REPO_ROOT / "examples" / "embed.py"), str(workspace)],
            env=warden_env(
                ANTHROPIC_BASE_URL=server.base_url,
                ANTHROPIC_API_KEY=API_KEY,
                WARDEN_STATE_DIR=str(settings.state_dir),
                WARDEN_CONFIG_DIR=str(settings.config_dir),
                CLAUDE_CONFIG_DIR=str(settings.claude_dir),
            ),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # The built-in types, Claude Code's Explore and Plan among them.
    assert "agent types: Explore, Plan, bash, general-purpose" in out
    assert "foreground: completed done" in out
    assert "background: completed I was not allowed to list them" in out
    assert "refused: Task failed. Error: unknown subagent type 'no-such-type'" in out
    assert "event: permission_denied bash" in out
    assert (workspace / "note.txt").read_text() == "hello\n"
    run_id = out.rsplit("run ", 1)[1].split()[0]
    assert containers_of(run_id) == []
    events = [
        json.loads(line)
        for line in (settings.state_dir / "runs" / run_id / "events.jsonl").read_text().splitlines()
    ]
    assert sum(e["kind"] == "task_completed" for e in events) == 2
    from orchestrator.store import Store

    with Store.open(settings.state_dir / "warden.db") as store:
        audit = store.audit(run_id)
    answered = {
        (r.tool_input.get("command"), r.final, r.decided_by) for r in audit if r.tool_name == "Bash"
    }
    assert answered == {
        ("echo hello > note.txt", "allow", "embed-example"),
        ("ls", "deny", "embed-example"),
    }
