"""Locks in two CI answers of the reviewed apply with the real engine and a
--replay script: the size cap given as a `warden run` flag (`--apply-max-file`)
rejects a change set over it, and a `PreApply` hook answering "ask" (Claude Code's
`permissionDecision` shape) keeps a change set from `--apply auto`: with nobody to
ask (CI) it waits for `warden apply`, the hook's reason recorded, while a change
set neither touches is applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.exit_codes import ExitCode
from tests.conftest import result_document, run_warden, write_script
from tests.integration.harness import (
    PARENT_MATCH,
    apply_records,
    convo,
    run_auto_apply,
    task,
    text,
    tool,
    trust_hooks,
    write_project_settings,
)

pytestmark = pytest.mark.integration

ASK = {
    "hookSpecificOutput": {
        "hookEventName": "PreApply",
        "permissionDecision": "ask",
        "permissionDecisionReason": "the team reviews askme files by hand",
    }
}
HOOK = (
    f"input=$(cat); if printf %s \"$input\" | grep -q askme; then printf %s '{json.dumps(ASK)}'; fi"
)


def test_a_flag_caps_sizes_and_a_pre_apply_ask_waits_in_ci(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    doc = {
        "hooks": {"PreApply": [{"matcher": "*", "hooks": [{"type": "command", "command": HOOK}]}]}
    }
    write_project_settings(workspace, doc)
    trust_hooks(settings, HOOK)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo(
                "parent", PARENT_MATCH,
                [task("BIGFILE go")], [task("ASKFILE go")], [task("OKFILE go")],
                [text("{last_tool_result}")],
            ),
            convo("big", {"prompt_contains": "BIGFILE"},
                  [tool("Bash", command="printf '%0100d' 0 > big.txt")], [text("big done")]),
            convo("ask", {"prompt_contains": "ASKFILE"},
                  [tool("Bash", command="echo hand > askme.txt")], [text("ask done")]),
            convo("ok", {"prompt_contains": "OKFILE"},
                  [tool("Bash", command="echo fine > ok.txt")], [text("ok done")]),
        ],
    )  # fmt: skip
    audit_out = tmp_path / "audit.json"
    proc = run_auto_apply(
        settings, workspace, script, "--apply-max-file", "64", "--json", "--fail-on", "rejected",
        "--audit-out", str(audit_out),
    )  # fmt: skip
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    assert result_document(proc)["failed_on"] == ["rejected"]
    assert (workspace / "ok.txt").read_text() == "fine\n"
    assert not (workspace / "big.txt").exists() and not (workspace / "askme.txt").exists()
    applies = apply_records(audit_out)
    by_outcome = {r["tool_input"]["outcome"]: r for r in applies}
    assert sorted(by_outcome) == ["applied", "pending", "rejected_by_policy"]
    assert "over the cap of 64 bytes" in by_outcome["rejected_by_policy"]["reason"]
    assert "the team reviews askme files by hand" in by_outcome["pending"]["reason"]
    listed = run_warden(settings, "ps", "--pending", "--json")
    waiting, text_left, decoder = [], listed.stdout.strip(), json.JSONDecoder()
    while text_left:  # one indented JSON object per waiting change set
        item, end = decoder.raw_decode(text_left)
        waiting.append(item)
        text_left = text_left[end:].strip()
    assert [w["paths"] for w in waiting if w["outcome"] == "pending"] == [["askme.txt"]]


def test_a_settings_key_caps_sizes_below_a_larger_flag(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """`warden.apply.maxFile` in the project's settings holds over a larger
    `--apply-max-file` (the stricter wins), in an untrusted workspace too."""
    write_project_settings(workspace, {"warden": {"apply": {"maxFile": 64}}})
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo("parent", PARENT_MATCH, [task("BIGFILE go")], [text("{last_tool_result}")]),
            convo("big", {"prompt_contains": "BIGFILE"},
                  [tool("Bash", command="printf '%0100d' 0 > big.txt")], [text("big done")]),
        ],
    )  # fmt: skip
    proc = run_auto_apply(
        settings, workspace, script, "--apply-max-file", "1m", "--json", "--fail-on", "rejected"
    )
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    assert result_document(proc)["failed_on"] == ["rejected"]
    assert not (workspace / "big.txt").exists()
    write_project_settings(workspace, {"warden": {"apply": {"maxFile": "6x"}}})
    bad = run_auto_apply(settings, workspace, script)
    assert bad.returncode != 0 and "`warden.apply.maxFile` is '6x', not a size" in bad.stderr
    assert not (workspace / "big.txt").exists()
