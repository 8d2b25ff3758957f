"""Locks in that the files a CI job asks for (`--junit`, `--audit-out`) are written
safely where a sandbox can reach: a subagent that plants a symbolic link to a host
file at the name, or a FIFO, during the run makes warden neither overwrite the
host file nor wait on the FIFO; both files are written whole, in the workspace."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.conftest import run_warden, write_script
from tests.integration.harness import PARENT_MATCH, convo, task, text, tool

pytestmark = pytest.mark.integration


def test_a_link_or_fifo_a_sandbox_leaves_at_a_result_file_is_replaced_not_followed(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    host_file = tmp_path / "authorized_keys"  # outside the workspace: the host's own
    host_file.write_text("host content\n")
    # One call each: a command line that makes a link and goes on asks (the analyser
    # cannot prove what later commands read through it), even under `--allow Bash`.
    plant = [
        f"ln -s {host_file} /workspace/junit.xml", "mkfifo /workspace/audit.json",
        f"ln -s {host_file} /workspace/proof-link", "mkfifo /workspace/proof-fifo",
    ]  # fmt: skip
    script = write_script(tmp_path / "script.yaml", [
        convo("parent", PARENT_MATCH, [task("PLANTER go", "general-purpose")], [text("done")]),
        convo("planter", {"prompt_contains": "PLANTER"},
              [tool("Bash", command=command) for command in plant], [text("planted")]),
    ])  # fmt: skip
    junit, audit = workspace / "junit.xml", workspace / "audit.json"
    proc = run_warden(
        settings,
        "run", "go", "--replay", str(script), "--workspace", str(workspace), "--allow", "Bash",
        "--json", "--junit", str(junit), "--audit-out", str(audit),
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert host_file.read_text() == "host content\n"
    assert junit.is_file() and not junit.is_symlink()
    assert ET.fromstring(junit.read_bytes()).tag == "testsuites"
    assert audit.is_file()  # the FIFO was replaced, not waited on
    assert "Bash" in [r["tool_name"] for r in json.loads(audit.read_text())]
    # the sandbox could plant them (the test would prove nothing otherwise)
    assert os.readlink(workspace / "proof-link") == str(host_file)
    assert stat.S_ISFIFO(os.lstat(workspace / "proof-fifo").st_mode)
    assert not [p for p in os.listdir(workspace) if p.endswith(".partial")]
