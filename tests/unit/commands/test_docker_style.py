"""The flags Docker users type work on warden's own listings: `ps -a/-q/--format`,
`logs --tail/-n` (with `--follow` too), and `warden completion bash|zsh|fish`. Text
from a container (a prompt, a description) prints as plain text in every form."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.store import Store, TaskRecord
from tests.conftest import warden_argv, warden_env

HOSTILE = "evil\x1b[31m\nsecond line"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state_dir = tmp_path / "state"
    with Store.open(state_dir / "warden.db") as store:
        for i in range(12):
            store.create_run(
                f"run_{i:02d}", prompt=HOSTILE, workspace="/ws", model="m", pid=os.getpid()
            )
            store.finish_run(f"run_{i:02d}", "completed", "done")
        store.create_task(
            TaskRecord(
                task_id="sa_x", run_id="run_11", agent_type="bash", description="d", prompt="p"
            )
        )
        store.update_task("sa_x", status="completed", ended_at=store.get_task("sa_x").created_at)
        for n in range(5):
            store.append_event("run_11", "sa_x", "task_running", {"n": n})
        store.checkpoint_transcript(
            "sa_x", [{"role": "user", "content": f"message {n}"} for n in range(4)], 1
        )
    return state_dir


def cli(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        warden_argv(*args), env=warden_env(WARDEN_STATE_DIR=str(state)), capture_output=True,
        text=True, timeout=60, check=check,
    )  # fmt: skip


def test_ps_quiet_prints_run_ids_and_all_lifts_the_default_ten(state: Path) -> None:
    assert len(cli(state, "ps", "-q").stdout.split()) == 10
    ids = cli(state, "ps", "-a", "-q").stdout.split()
    assert sorted(ids) == [f"run_{i:02d}" for i in range(12)]


def test_ps_format_fills_docker_placeholders_with_plain_text(state: Path) -> None:
    out = cli(state, "ps", "--format", "{{.ID}}|{{ .Status }}|{{.Tasks}}|{{.Prompt}}").stdout
    lines = out.splitlines()
    assert len(lines) == 10  # the hostile prompt's newline did not add a line
    assert lines[0].startswith("run_11|completed|1|evil") and "\x1b" not in out
    as_json = [
        json.loads(line) for line in cli(state, "ps", "--format", "json").stdout.splitlines()
    ]
    assert as_json[0]["run_id"] == "run_11" and as_json[0]["tasks"] == 1


def test_ps_format_refuses_an_unknown_field(state: Path) -> None:
    proc = cli(state, "ps", "--format", "{{.ID}} {{.Secret}}", check=False)
    assert proc.returncode == 2 and "unknown field(s) Secret" in proc.stderr


def test_logs_tail_shows_the_last_events_and_messages(state: Path) -> None:
    doc = json.loads(cli(state, "logs", "sa_x", "--tail", "2", "--json").stdout)
    assert [e["data"]["n"] for e in doc["events"]] == [3, 4]
    assert [m["content"] for m in doc["transcript"]] == ["message 2", "message 3"]
    follow = cli(state, "logs", "sa_x", "-n", "1", "--follow", "--json").stdout.splitlines()
    assert [json.loads(line)["data"]["n"] for line in follow] == [4]
    text = cli(state, "logs", "run_11", "-n", "0").stdout
    assert "--- events ---" in text and "task_running" not in text


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_ask_warden_for_candidates(state: Path, shell: str) -> None:
    script = cli(state, "completion", shell).stdout
    assert "_WARDEN_COMPLETE" in script and "warden" in script


def test_completion_answers_with_subcommands_and_options(state: Path) -> None:
    env = warden_env(_WARDEN_COMPLETE="bash_complete", COMP_WORDS="warden ps --fo", COMP_CWORD="2")
    done = subprocess.run(warden_argv(), env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["plain,--format"]
