"""Streamed answers that break are retried on the host, and one that never arrives
whole is one clear line: `warden run` against the scripted model cutting its
streams (a clean end inside a tool input, no `message_stop`, an `overloaded_error`
or `api_error` event, a connection reset), with the real SDK and real containers.
A broken answer is never taken for a complete one: the tool it asked for runs once
the answer arrives whole, and when it never does the task fails saying what
happened (no invented HTTP status) and what can help."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from tests.conftest import result_document, run_warden, write_script
from tests.integration.harness import PARENT_MATCH, containers_of, task, text, tool

pytestmark = pytest.mark.integration

KINDS = ("cut_in_block", "no_message_stop", "overloaded_error", "api_error", "reset")


def child(kind: str, times: int | None) -> dict[str, Any]:
    return {
        "name": f"child-{kind}",
        "match": {"prompt_contains": f"BROKEN {kind} "},
        "turns": [
            {
                "content": [tool("Bash", command=f"echo {kind} > {kind}.txt")],
                "stream_fault": {"kind": kind, "times": times},
            },
            {"content": [text(f"{kind} done")]},
        ],
    }


def warden_run(
    settings: Settings, workspace: Path, tmp_path: Path, conversations: list[dict[str, Any]]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    script = write_script(tmp_path / "script.yaml", conversations)
    done = run_warden(
        settings,
        *("run", "go", "--replay", str(script), "--workspace", str(workspace), "--json"),
        *("--permission-mode", "bypassPermissions"),
        timeout=300,
        WARDEN_MODEL_MAX_RETRIES="2",
    )
    assert "Traceback" not in done.stderr, done.stderr
    final = result_document(done)
    assert containers_of(final["run_id"]) == []
    return done, final


def retry_notices(settings: Settings, run_id: str) -> list[str]:
    events_file = settings.state_dir / "runs" / run_id / "events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    return [
        e["data"]["message"]
        for e in events
        if e["kind"] == "broker_notice" and e["data"].get("notice") == "model_retries"
    ]


def test_each_broken_stream_is_retried_and_its_tool_runs(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    workspace.chmod(0o777)
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [
            {"content": [task(f"BROKEN {kind} go", "bash") for kind in KINDS]},
            {"content": [text("parent done")]},
        ],
    }
    done, final = warden_run(
        settings, workspace, tmp_path, [parent, *(child(kind, 1) for kind in KINDS)]
    )
    assert done.returncode == 0, done.stderr
    assert sorted(t["status"] for t in final["tasks"]) == ["completed"] * len(KINDS), final
    for kind in KINDS:  # the tool the broken answer asked for ran once it came whole
        assert (workspace / f"{kind}.txt").read_text() == f"{kind}\n"
    notices = retry_notices(settings, final["run_id"])
    assert len(notices) == len(KINDS), notices
    for notice in notices:
        assert "#1 incomplete (" in notice and notice.endswith("it succeeded"), notice
    said = "\n".join(notices)
    assert "inside content block 0 (tool_use)" in said
    assert "after its last content block, without message_stop" in said
    assert "the API sent overloaded_error inside the stream: Overloaded" in said
    assert "the API sent api_error inside the stream" in said
    assert "the connection broke in the middle of the stream" in said


@pytest.mark.parametrize("kind", ["cut_in_block", "overloaded_error"])
def test_a_stream_that_never_arrives_whole_fails_the_task_with_one_clear_line(
    settings: Settings, workspace: Path, tmp_path: Path, kind: str
) -> None:
    workspace.chmod(0o777)
    parent = {
        "name": "parent",
        "match": PARENT_MATCH,
        "turns": [
            {"content": [task(f"BROKEN {kind} go", "bash")]},
            {"content": [text("parent saw: {last_tool_result}")]},
        ],
    }
    done, final = warden_run(settings, workspace, tmp_path, [parent, child(kind, None)])
    (sub,) = final["tasks"]
    assert sub["status"] == "failed", final
    error = sub["error"]
    assert error.startswith("the model API's streamed answer was incomplete ("), error
    assert "after 3 attempts" in error  # WARDEN_MODEL_MAX_RETRIES=2: three in all
    assert "HTTP 502" not in error and "HTTP 529" not in error
    if kind == "overloaded_error":
        assert "The API is overloaded: try again later, or allow more retries" in error
    else:
        assert "inside content block 0 (tool_use)" in error
        assert "ended the stream early" in error
    assert not (workspace / f"{kind}.txt").exists()  # half a tool input never ran
    assert re.search(r":\d+v1/", done.stderr) is None, done.stderr  # the endpoint's slash
