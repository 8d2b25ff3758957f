"""`warden resume` ends exactly as `warden run` does: the same exit codes (2 for an
unknown session, 3 for a `--fail-on` outcome), `--json` ending with exactly one result
document valid against the published schema (also on an error), `--junit`,
`--audit-out`, and the end-of-run summary table when not in JSON mode."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator.config import Settings
from orchestrator.exit_codes import ExitCode
from tests.conftest import REPO_ROOT, result_document, run_warden, write_script
from tests.integration.harness import PARENT_MATCH, containers_of, convo, task, text, tool

pytestmark = pytest.mark.integration

RESULT_SCHEMA: dict[str, Any] = json.loads(
    (REPO_ROOT / "docs" / "schema" / "result.schema.json").read_text()
)
KEEPER_TURNS = (
    [text("first answer")],
    [tool("Bash", command="rm -rf /workspace/keep.txt")],
    [text("could not clean up")],
    [text("nothing left to do")],
)


def test_an_unknown_session_is_a_usage_error_with_one_result_document(
    settings: Settings, tmp_path: Path
) -> None:
    script = write_script(tmp_path / "none.yaml", [])
    proc = run_warden(settings, "resume", "sa_nosuch", "go on", "--replay", str(script), "--json")
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    final = result_document(proc)
    jsonschema.validate(final, RESULT_SCHEMA)
    assert final["status"] == "failed" and final["exit_code"] == ExitCode.USAGE
    assert "no subagent session 'sa_nosuch'" in final["error"]
    assert "Traceback" not in proc.stderr


def test_resume_gates_on_fail_on_and_writes_junit_audit_and_the_summary(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    first = write_script(
        tmp_path / "first.yaml",
        [
            convo("parent", PARENT_MATCH, [task("KEEPER start", "bash")], [text("started")]),
            convo("keeper", {"prompt_contains": "KEEPER"}, *KEEPER_TURNS),
        ],
    )
    ran = run_warden(
        settings, "run", "go", "--replay", str(first), "--workspace", str(workspace), "--json"
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    (keeper,) = result_document(ran)["tasks"]

    # The resumed subagent tries a call the default policy asks about; with nobody
    # to answer (CI=true) it is denied, and --fail-on denied gates on it.
    again = write_script(
        tmp_path / "again.yaml", [convo("keeper", {"prompt_contains": "KEEPER"}, *KEEPER_TURNS)]
    )
    junit, audit_out = tmp_path / "junit.xml", tmp_path / "audit.json"
    proc = run_warden(
        settings,
        "resume", keeper["task_id"], "clean up", "--replay", str(again), "--json",
        "--fail-on", "denied", "--junit", str(junit), "--audit-out", str(audit_out),
    )  # fmt: skip
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    assert (workspace / "keep.txt").read_text() == "precious\n"
    final = result_document(proc)
    jsonschema.validate(final, RESULT_SCHEMA)
    assert final["status"] == "completed" and final["result"] == "could not clean up"
    assert final["exit_code"] == ExitCode.OUTCOME and final["failed_on"] == ["denied"]
    (resumed,) = final["tasks"]
    assert resumed["task_id"] != keeper["task_id"] and resumed["denials"] == 1
    assert [d["tool_name"] for d in final["denials"]] == ["Bash"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    audit = json.loads(audit_out.read_text())
    assert [(a["tool_name"], a["final"]) for a in audit] == [("Bash", "deny")]
    assert containers_of(final["run_id"]) == []

    # Without --json: the answer on stdout, the summary table on stderr, exit 0.
    plain = run_warden(settings, "resume", keeper["task_id"], "clean up", "--replay", str(again))
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.stdout.strip() == "nothing left to do"
    rows = [line for line in plain.stderr.splitlines() if "resume sa_" in line]
    assert rows and "bash" in rows[-1] and "completed" in rows[-1], plain.stderr
