"""Locks in reviewed apply as a CI job runs it (`warden run --isolation worktree
--apply auto --fail-on rejected`, CI=true, a --replay script, the real engine):
what policy passes is applied without a person, a change set policy rejects is
not, the job exits 3 naming `rejected`, the parent's Task result says what became
of its subagent's changes, and the audit holds one `Apply` record per change set."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.exit_codes import ExitCode
from tests.conftest import UNPRIVILEGED, result_document, write_script
from tests.integration.harness import (
    PARENT_MATCH,
    apply_records,
    convo,
    run_auto_apply,
    task,
    text,
    tool,
)

pytestmark = pytest.mark.integration


def test_a_ci_run_applies_what_policy_passes_and_fails_on_a_rejection(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo(
                "parent", PARENT_MATCH,
                [task("EXEFILE go")], [task("OKFILE go")], [text("{last_tool_result}")],
            ),
            convo("exe", {"prompt_contains": "EXEFILE"},
                  [tool("Bash", command="echo 'echo hi' > run.sh && chmod +x run.sh")],
                  [text("rc done")]),
            convo("ok", {"prompt_contains": "OKFILE"},
                  [tool("Bash", command="echo fine > ok.txt")], [text("ok done")]),
        ],
    )  # fmt: skip
    audit_out = tmp_path / "audit.json"
    proc = run_auto_apply(
        settings, workspace, script, "--json", "--fail-on", "rejected,conflict",
        "--audit-out", str(audit_out),
    )  # fmt: skip
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    result = result_document(proc)
    assert result["failed_on"] == ["rejected"]
    assert "Worktree isolation: its changes were applied" in result["result"]
    assert (workspace / "ok.txt").read_text() == "fine\n"
    assert (workspace / "ok.txt").stat().st_uid == UNPRIVILEGED  # still the person's
    assert not (workspace / "run.sh").exists()  # a new executable: rejected by policy
    applies = apply_records(audit_out)
    outcomes = sorted(r["tool_input"]["outcome"] for r in applies)
    assert outcomes == ["applied", "rejected_by_policy"]
