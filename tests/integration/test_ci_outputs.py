"""Locks in what a CI job relies on from `warden run` (CI=true, stdin closed, a
--replay script, only documented flags): the exit code gates on --fail-on, --json
ends with exactly one result document valid against the published schema, every
event line (stdout, events.jsonl, `logs --json`, `logs --follow --json`) has the
one published event shape, a denial is an event, and --junit / --audit-out write
files a CI system can publish."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from orchestrator.config import Settings
from orchestrator.exit_codes import ExitCode
from tests.conftest import REPO_ROOT, result_document, run_warden, write_script
from tests.integration.harness import PARENT_MATCH, convo, task, text, tool

pytestmark = pytest.mark.integration

SCHEMAS = REPO_ROOT / "docs" / "schema"


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return loaded


def test_a_ci_job_gates_on_a_denial_and_publishes_json_junit_and_audit(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    workspace.chmod(0o777)  # the sandboxes run as another unprivileged user (--user)
    script = [
        convo("parent", PARENT_MATCH, [task("CLEANER go", "general-purpose")], [text("all done")]),
        convo(
            "cleaner",
            {"prompt_contains": "CLEANER"},
            [tool("Write", file_path="/workspace/out.txt", content="<b>&amp;\x1b[31m</b>\n")],
            [tool("Bash", command="rm -rf /workspace/keep.txt")],
            [text("tried to clean up\x07 </failure>]]>")],
        ),
    ]
    script_path = tmp_path / "script.yaml"
    script_path.write_text(yaml.safe_dump({"conversations": script}))
    junit, audit_out = tmp_path / "junit.xml", tmp_path / "audit.json"
    proc = run_warden(
        settings,
        "run", "go", "--replay", str(script_path), "--workspace", str(workspace),
        "--permission-mode", "acceptEdits", "--deny", "Bash(rm:*)", "--disk-write-limit", "64m",
        "--json", "--fail-on", "failed,denied", "--user", "1234:1234", "--junit", str(junit), "--audit-out", str(audit_out),
    )  # fmt: skip

    # The denial is what the job gates on: exit 3, not 0, and nothing was deleted.
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    assert (workspace / "keep.txt").read_text() == "precious\n"
    assert (workspace / "out.txt").stat().st_uid == 1234  # --user: the sandbox's identity
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    results = [doc for doc in lines if doc.get("type") == "result"]
    assert len(results) == 1 and results[0] is lines[-1]
    result = lines[-1]
    jsonschema.validate(result, _schema("result"))
    assert result["status"] == "completed" and result["result"] == "all done"
    assert result["exit_code"] == 3 and result["failed_on"] == ["denied"]
    assert result["parent_tokens"] > 0 and result["tokens"] > 0
    (summary,) = result["tasks"]
    assert summary["status"] == "completed" and summary["parent_id"] is None
    assert summary["denials"] == 1 and summary["tool_calls"] >= 1
    assert summary["files_written"] == ["/workspace/out.txt"]
    assert summary["tokens"] > 0 and summary["duration_s"] > 0
    assert [d["tool_name"] for d in result["denials"]] == ["Bash"]

    # Every event line has the one published shape, and the denial is among them.
    events_schema = _schema("events")
    for event in lines[:-1]:
        jsonschema.validate(event, events_schema)
    denied = [e for e in lines if e.get("kind") == "permission_denied"]
    assert [e["data"]["tool_name"] for e in denied] == ["Bash"]
    assert denied[0]["task_id"] == summary["task_id"]
    jsonl = settings.state_dir / "runs" / result["run_id"] / "events.jsonl"
    stored = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert stored == lines[:-1]

    # `logs --json` and `logs --follow --json` print the same event documents.
    task_id = summary["task_id"]
    logs = run_warden(settings, "logs", task_id, "--json")
    assert logs.returncode == 0, logs.stderr
    task_events = [e for e in stored if e["task_id"] == task_id]
    assert json.loads(logs.stdout)["events"] == task_events
    follow = run_warden(settings, "logs", task_id, "--follow", "--json")
    assert follow.returncode == 0, follow.stderr
    assert [json.loads(line) for line in follow.stdout.splitlines()] == task_events

    # JUnit: the parent and one case per task; the denial is a failure; the
    # container's text arrives escaped and the file stays well-formed XML.
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failure = suite.find("testcase[@name='test task']/failure")
    assert suite.find(f"properties/property[@name='task_id: test task'][@value='{task_id}']") is not None
    assert failure is not None and failure.get("type") == "denied"
    assert "Bash" in (failure.text or "")

    # The audit artifact holds every decision, the denied one included.
    audit = json.loads(audit_out.read_text())
    assert [(a["tool_name"], a["final"]) for a in audit] == [("Write", "allow"), ("Bash", "deny")]

    # See into the run: the parent's own conversation, the subagent's setup, and
    # `audit` filtered and readable when piped (JSON inputs, one line per row).
    run_logs = run_warden(settings, "logs", result["run_id"])
    assert run_logs.returncode == 0, run_logs.stderr
    assert "--- parent transcript (4 messages) ---" in run_logs.stdout
    assert "CLEANER go" in run_logs.stdout and "[assistant] all done" in run_logs.stdout
    run_json = json.loads(run_warden(settings, "logs", result["run_id"], "--json").stdout)
    assert run_json["parent_transcript"]["tools"] == ["Task", "TaskOutput", "TaskStop"]
    task_logs = run_warden(settings, "logs", task_id).stdout
    assert "model: " in task_logs and "--- system prompt ---" in task_logs
    assert re.search(r"^tools: .*\bWrite\b", task_logs, re.M), task_logs
    assert re.search(r"^limits: max_turns \d+, timeout [\d.]+ s, .*memory_bytes", task_logs, re.M)
    # The disk caps it ran under, as given on the command line.
    assert re.search(r"^disk: write limit 64\.0 MiB, free floor ", task_logs, re.M), task_logs
    denied_rows = run_warden(
        settings, "audit", result["run_id"], "--tool", "Bash", "--decision", "deny"
    )
    assert '{"command": "rm -rf /workspace/keep.txt"}' in denied_rows.stdout, denied_rows.stdout
    assert "Write" not in denied_rows.stdout
    allowed = run_warden(settings, "audit", "--task", task_id, "--decision", "allow", "--json")
    assert [a["tool_name"] for a in json.loads(allowed.stdout)] == ["Write"]

    # Without --fail-on the same outcome is a success for the pipeline, and the
    # terminal summary lists the task with its denial.
    plain = run_warden(
        settings,
        "run", "go", "--replay", str(script_path), "--workspace", str(workspace),
        "--permission-mode", "acceptEdits", "--deny", "Bash(rm:*)",
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.stdout.strip() == "all done"
    rows = [line for line in plain.stderr.splitlines() if "sa_" in line and "test task" in line]
    # Denied 1; files changed 0: the Write was allowed, but out.txt now belongs to the
    # first run's --user, so the file system refused it and nothing changed.
    assert re.search(r"test task\W+general-purpose\W+completed\W.*\W1\W+0\W*$", rows[-1]), rows


async def test_a_run_is_traced_with_spans_for_run_task_model_and_tool_calls(
    settings: Settings, workspace: Path
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.integration.harness import scripted_run

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    script = [
        convo("parent", PARENT_MATCH, [task("TRACED go", "bash")], [text("traced")]),
        convo(
            "traced",
            {"prompt_contains": "TRACED"},
            [tool("Bash", command="echo hi")],
            [text("said hi")],
        ),
    ]
    async with scripted_run(settings, workspace, script, tracer_provider=provider) as (run, _):
        outcome = await run.parent.run("go")
        run_id = run.run_id
        events = run.store.events(run_id=run_id)
    assert outcome.text == "traced"

    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    (run_span,) = [s for s in spans if s.name == "invoke_agent parent"]
    (call_span,) = [s for s in spans if s.name == "execute_tool Task"]
    (task_span,) = [s for s in spans if s.name.startswith("invoke_agent ") and s is not run_span]
    (tool_span,) = [s for s in spans if s.name == "execute_tool Bash"]
    model_spans = [s for s in spans if s.name.startswith("chat ")]
    assert len(model_spans) == 4, names  # two parent turns, two subagent turns
    # One W3C trace: the same id on every span and every event of the run.
    trace_ids = {f"{s.context.trace_id:032x}" for s in spans}
    assert trace_ids == {e.data["trace_id"] for e in events if e.data.get("trace_id")}
    assert len(next(iter(trace_ids))) == 32
    # run > the parent's Task call > the task > its tool call.
    assert call_span.parent is not None and call_span.parent.span_id == run_span.context.span_id
    assert task_span.parent is not None and task_span.parent.span_id == call_span.context.span_id
    assert tool_span.parent is not None and tool_span.parent.span_id == task_span.context.span_id
    under_task = [
        s for s in model_spans if s.parent and s.parent.span_id == task_span.context.span_id
    ]
    assert len(under_task) == 2
    assert all(
        s.attributes and _positive(s.attributes["gen_ai.usage.output_tokens"]) for s in under_task
    )
    assert task_span.attributes and _positive(task_span.attributes["warden.tokens"])
    assert task_span.attributes["warden.status"] == "completed"


def test_files_changed_count_bash_writes_and_say_shared_when_tasks_overlap(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    def writer(label: str, command: str) -> dict[str, Any]:
        return convo(label, {"prompt_contains": label.upper()}, [tool("Bash", command=command)],
                     [text(f"{label} done")])  # fmt: skip

    script = write_script(
        tmp_path / "files.yaml",
        [
            convo(
                "parent",
                PARENT_MATCH,
                [task("PAIR1 go", "bash"), task("PAIR2 go", "bash")],  # run at once
                [task("SOLO go", "bash")],  # runs alone
                [text("done")],
            ),
            writer("pair1", "echo 1 > pair1.txt"),
            writer("pair2", "echo 2 > pair2.txt"),
            writer("solo", "mkdir -p out && echo s > out/solo.txt && rm keep.txt"),
        ],
    )
    (workspace / "keep.txt").write_text("old\n")
    proc = run_warden(
        settings, "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    tasks = {t["task_id"]: t for t in result_document(proc)["tasks"]}
    by_file = {tuple(t["files_changed"]): t for t in tasks.values()}
    solo = by_file[("/workspace/keep.txt", "/workspace/out/solo.txt")]
    assert solo["files_attribution"] == "sole" and solo["files_changed_count"] == 2
    assert solo["files_written"] == []  # Bash wrote them: no Write/Edit call did
    pairs = [t for t in tasks.values() if t is not solo]
    assert [t["files_attribution"] for t in pairs] == ["shared", "shared"]
    for pair in pairs:  # each window may hold the other's write: listed, not hidden
        assert set(pair["files_changed"]) <= {"/workspace/pair1.txt", "/workspace/pair2.txt"}
        assert pair["files_changed"]


def _positive(value: object) -> bool:
    """A span attribute holding a count above zero."""
    return isinstance(value, int) and value > 0
