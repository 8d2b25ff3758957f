"""Locks in that a subagent working in its own copy (`--isolation worktree`) cannot get
a protected path changed through the reviewed apply: the settings files'
`warden.protect` paths are read-only mounts in its copy, but one missing at the run's
start has nothing to mount, and a link needs no write to the path it points into. The
apply policy refuses both, whatever the mode (real engine, --replay script)."""

from __future__ import annotations

import os
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
    write_project_settings,
)

pytestmark = pytest.mark.integration


def test_a_copy_cannot_create_a_missing_protected_path_or_link_into_one(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    write_project_settings(workspace, {"warden": {"protect": ["generated", "secrets"]}})
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key").write_text("s3cret\n")
    if os.geteuid() == 0:
        for path in (workspace / "secrets", workspace / "secrets" / "key"):
            os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo(
                "parent", PARENT_MATCH,
                [task("MAKEGEN go")], [task("LINKSECRET go")], [task("OKFILE go")],
                [text("{last_tool_result}")],
            ),
            convo("gen", {"prompt_contains": "MAKEGEN"},
                  [tool("Bash", command="mkdir -p generated && echo planted > generated/run.sh")],
                  [text("gen done")]),
            convo("link", {"prompt_contains": "LINKSECRET"},
                  [tool("Bash", command="ln -s secrets/key leak")], [text("link done")]),
            convo("ok", {"prompt_contains": "OKFILE"},
                  [tool("Bash", command="echo fine > ok.txt")], [text("ok done")]),
        ],
    )  # fmt: skip
    audit_out = tmp_path / "audit.json"
    proc = run_auto_apply(
        settings, workspace, script, "--json", "--fail-on", "rejected",
        "--audit-out", str(audit_out),
    )  # fmt: skip
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    assert result_document(proc)["failed_on"] == ["rejected"]
    assert (workspace / "ok.txt").read_text() == "fine\n"  # the apply itself works
    assert not os.path.lexists(workspace / "generated")
    assert not os.path.lexists(workspace / "leak")
    applies = apply_records(audit_out)
    rejected = sorted(r["reason"] for r in applies
                      if r["tool_input"]["outcome"] == "rejected_by_policy")  # fmt: skip
    assert len(rejected) == 2, applies
    assert any("protected path (generated)" in reason for reason in rejected), rejected
    assert any("into the protected path secrets" in reason for reason in rejected), rejected
