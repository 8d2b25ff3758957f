"""A session whose orchestrator was SIGKILLed right after the model asked for a
tool (the transcript ends with an unanswered tool_use) resumes with `warden
resume SESSION "continue"` against the strict scripted model: the interrupted
call is answered as interrupted (it may have run), the conversation is valid,
the run succeeds, and nothing of either run is left on the engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config import Settings
from orchestrator.store import Store
from sandbox_tools.conversation import INTERRUPTED_RESULT
from tests.conftest import warden_argv, warden_env
from tests.integration.harness import PARENT_MATCH, containers_of, convo, task, text, tool
from tests.json_shapes import arr, obj

pytestmark = pytest.mark.integration

CRASHY_TURNS = [
    [tool("Bash", command="echo one > one.txt")],
    [tool("Bash", command="sleep 300", timeout=600000)],
    [text("resumed; the model saw: {last_tool_result}")],
]


def _write(path: Path, conversations: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"conversations": conversations, "when_exhausted": "error"}))
    return path


def test_resume_after_a_kill_between_tool_use_and_result(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    run_script = _write(
        tmp_path / "run.yaml",
        [
            convo("parent", PARENT_MATCH, [task("CRASHY work", "bash")], [text("x")]),
            convo("crashy", {"prompt_contains": "CRASHY"}, *CRASHY_TURNS),
        ],
    )
    env = warden_env(
        WARDEN_STATE_DIR=str(settings.state_dir),
        WARDEN_CONFIG_DIR=str(settings.config_dir),
        CI="true",
    )
    proc = subprocess.Popen(
        warden_argv(
            *("run", "go", "--replay", str(run_script), "--workspace", str(workspace)),
            *("--permission-mode", "bypassPermissions"),
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    store = Store.open(settings.state_dir / "warden.db")
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()
            tasks = store.list_tasks()
            transcript = store.get_transcript(tasks[0].task_id) if tasks else []
            # Checkpointed by the broker after the model asked for `sleep 300`; the
            # runner is now running it, so no result will be checkpointed.
            if len(transcript) == 4 and transcript[-1]["role"] == "assistant":
                break
            assert time.monotonic() < deadline, "the task never asked for its second tool"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        store.close()
    crashed = tasks[0]
    (sleep_call,) = [obj(b) for b in arr(transcript[-1]["content"]) if obj(b)["type"] == "tool_use"]

    resume_script = _write(
        tmp_path / "resume.yaml", [convo("crashy", {"prompt_contains": "CRASHY"}, *CRASHY_TURNS)]
    )
    done = subprocess.run(
        warden_argv(
            *("resume", crashed.session_id, "continue"), "--replay", str(resume_script), "--json"
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert final["type"] == "result" and final["status"] == "completed", final
    # The model got the interrupted call's result, then the new instruction.
    assert final["result"] == f"resumed; the model saw: {INTERRUPTED_RESULT}"

    with Store.open(settings.state_dir / "warden.db") as store:
        old = store.get_task(crashed.task_id)
        assert old.status == "interrupted"
        assert store.get_run(crashed.run_id).status == "interrupted"
        session = store.list_tasks(session_id=crashed.session_id)
        assert [t.status for t in session] == ["interrupted", "completed"]
        resumed = session[-1]
        assert store.get_run(resumed.run_id).status == "completed"
        history = store.get_transcript(resumed.task_id)
    closing = history[4]
    assert closing["role"] == "user"
    assert arr(closing["content"])[0] == {
        "type": "tool_result",
        "tool_use_id": sleep_call["id"],
        "content": INTERRUPTED_RESULT,
        "is_error": True,
    }
    assert arr(closing["content"])[1] == {"type": "text", "text": "continue"}
    assert containers_of(crashed.run_id) == []
    assert containers_of(resumed.run_id) == []
