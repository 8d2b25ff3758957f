"""Model API errors end cleanly, parent or subagent: `warden run` against the
scripted model (real SDK, real containers) turns a 400 or 402 into one line that
names the cause and the fix, exit status 1 and a final JSON result, never a
traceback; 529s are retried until the call succeeds (a subagent's by its
broker's SDK on the host, which records each retried call); 402 is never
retried; and nothing of the run is left on the engine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.store import Store
from tests.conftest import result_document, run_warden, write_script
from tests.integration.harness import PARENT_MATCH, containers_of, task, text, tool

pytestmark = pytest.mark.integration


def turn(content: list[dict[str, Any]], **error: Any) -> dict[str, Any]:
    return {"content": content, **({"error": error} if error else {})}


def warden_run(
    settings: Settings, workspace: Path, tmp_path: Path, conversations: list[dict[str, Any]]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    script = write_script(tmp_path / "script.yaml", conversations)
    done = run_warden(
        settings,
        *("run", "go", "--replay", str(script), "--workspace", str(workspace), "--json"),
        *("--permission-mode", "bypassPermissions"),
        timeout=180,
    )
    assert "Traceback" not in done.stderr, done.stderr
    final = result_document(done)
    with Store.open(settings.state_dir / "warden.db") as store:
        assert store.get_run(final["run_id"]).status == final["status"]
    assert containers_of(final["run_id"]) == []
    return done, final


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("warden: error:")]


def test_parent_400_is_one_line_exit_1_and_a_json_result(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [turn([text("never")], status=400, message="messages.0: scripted bad request")],
    }
    done, final = warden_run(settings, workspace, tmp_path, [parent])
    assert done.returncode == 1
    (line,) = error_lines(done)
    assert line.startswith(
        "warden: error: the model API answered HTTP 400 invalid_request_error: "
        "messages.0: scripted bad request (not retried)."
    )
    assert "report it with the run's events file" in line
    assert final["status"] == "failed" and final["error"] == line.removeprefix("warden: error: ")


def test_529s_are_retried_until_parent_and_subagent_succeed(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    busy = {"status": 529, "retry_after_s": 0.01, "times": 3}
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [
            turn([task("BUSY child", "bash")], **busy),
            turn([text("parent saw: {last_tool_result}")], **busy),
        ],
    }
    child = {
        "name": "child",
        "match": {"prompt_contains": "BUSY"},
        "turns": [
            turn([tool("Bash", command="echo done > busy.txt")], **busy),
            turn([text("child finished")], **busy),
        ],
    }
    done, final = warden_run(settings, workspace, tmp_path, [parent, child])
    assert done.returncode == 0, done.stderr
    assert final["status"] == "completed"
    assert final["result"] == "parent saw: Task Succeeded. Result: child finished"
    assert (workspace / "busy.txt").read_text() == "done\n"
    # The subagent's 529s were retried on the host, by its broker's SDK: each of its
    # two model calls is one request from the sandbox and one event saying so.
    events_file = settings.state_dir / "runs" / final["run_id"] / "events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    retried = [
        e["data"]["message"]
        for e in events
        if e["kind"] == "broker_notice" and e["data"].get("notice") == "model_retries"
    ]
    assert len(retried) == 2, retried
    for message in retried:
        assert message.startswith("model call retried 3 time(s) on the host")
        assert "#1 HTTP 529 overloaded_error" in message and message.endswith("it succeeded")


def test_402_is_not_retried_for_subagent_or_parent(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    billing = {"status": 402, "message": "Your credit balance is too low"}
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [turn([task("BROKE child", "bash")]), turn([text("unreached")], **billing)],
    }
    child = {
        "name": "child",
        "match": {"prompt_contains": "BROKE"},
        "turns": [turn([text("unreached")], **billing)],
    }
    done, final = warden_run(settings, workspace, tmp_path, [parent, child])
    assert done.returncode == 1
    (line,) = error_lines(done)
    expected = (
        "the model API answered HTTP 402 billing_error: Your credit balance is too low "
        "(not retried). A spend limit or billing problem: add credits or raise the limit"
    )
    assert line.startswith(f"warden: error: {expected}")
    (child_result,) = final["tasks"]
    assert child_result["status"] == "failed"
    assert child_result["error"].startswith(expected)
