"""A CI job (CI=true, no terminal) whose questions a webhook answers: `warden run
--approver webhook:URL` with the documented receiver (docs/webhook_receiver.py) on
127.0.0.1. The command the receiver allows runs in the subagent's container, the one
it denies does not and the model reads its reason, and the audit names the channel
and the person who answered (`webhook:NAME`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.conftest import REPO_ROOT, run_warden, write_script
from tests.integration.harness import PARENT_MATCH, convo, task, text, tool

pytestmark = pytest.mark.integration

RECEIVER = REPO_ROOT / "docs" / "webhook_receiver.py"
SECRET = "webhook-test-secret"


def test_a_webhook_answers_a_ci_runs_questions(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    workspace.chmod(0o777)  # the sandbox runs as another unprivileged user (--user)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo("parent", PARENT_MATCH, [task("ASKER go", "general-purpose")], [text("done")]),
            convo(
                "asker",
                {"prompt_contains": "ASKER"},
                [tool("Bash", command="touch hooked.txt")],
                [tool("Bash", command="touch refused.txt")],
                [text("asked twice")],
            ),
        ],
    )
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), "--port", "0", "--allow", "touch hooked.txt",
         "--person", "release-bot"],
        env={"WARDEN_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert receiver.stdout is not None
        url = receiver.stdout.readline().removeprefix("listening on ").strip()
        proc = run_warden(
            settings,
            "run", "go", "--replay", str(script), "--workspace", str(workspace),
            "--permission-mode", "default", "--user", "1234:1234",
            "--approver", f"webhook:{url}", "--audit-out", str(tmp_path / "audit.json"),
            WARDEN_WEBHOOK_SECRET=SECRET,
        )  # fmt: skip
    finally:
        receiver.terminate()
        out, _ = receiver.communicate(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workspace / "hooked.txt").exists()
    assert not (workspace / "refused.txt").exists()

    audit = json.loads((tmp_path / "audit.json").read_text())
    records = audit if isinstance(audit, list) else audit["records"]
    asked = {r["tool_input"]["command"]: r for r in records if r["decision"] == "ask"}
    assert asked["touch hooked.txt"]["final"] == "allow"
    assert asked["touch hooked.txt"]["decided_by"] == "webhook:release-bot"
    assert asked["touch refused.txt"]["final"] == "deny"
    assert asked["touch refused.txt"]["decided_by"] == "webhook:release-bot"
    assert asked["touch refused.txt"]["reason"] == "release-bot allows only: touch hooked.txt"
    assert {(r["channel"], r["person"]) for r in asked.values()} == {("webhook", "release-bot")}
    # The receiver saw each question once, checked its signature, and answered it.
    assert out.count("(new)") == 2 and "bad signature" not in out, out
    assert out.count("-> 200") == 2, out


def test_a_webhook_approver_without_its_secret_is_refused_before_anything_runs(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.yaml", [convo("p", PARENT_MATCH, [text("done")])])
    proc = run_warden(
        settings, "run", "go", "--workspace", str(workspace), "--replay", str(script),
        "--approver", "webhook:http://127.0.0.1:9/hook",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "set WARDEN_WEBHOOK_SECRET" in proc.stderr, proc.stderr
    bad = run_warden(settings, "run", "go", "--workspace", str(workspace), "--approver", "slack")
    assert bad.returncode == 2 and "unknown approver 'slack'" in bad.stderr, bad.stderr
