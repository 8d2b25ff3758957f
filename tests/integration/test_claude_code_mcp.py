"""Claude Code itself as the parent: the pinned Claude Code CLI, offline in a network
namespace with only `lo`, registers `warden mcp` with the README's `claude mcp add`
lines (stdio; streamable HTTP with the bearer token); its scripted model calls
warden's `Task` tool; the subagent runs in a warden container (it writes a file
there); and its answer comes back into Claude Code's conversation, visible in the
next request the scripted server records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.differential import compare as differential
from tests.integration.claude_code_mcp import ANSWER
from tests.integration.harness import containers_of
from tests.integration.session_procs import BUSY_LOOPS, busy_machine, wait_until_ended

pytestmark = pytest.mark.integration


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            found += [b for b in content if b.get("type") == "tool_result"]
    return found


@pytest.mark.parametrize(
    ("transport", "loaded"), [("stdio", False), ("http", False), ("stdio", True)]
)
def test_claude_code_delegates_to_a_warden_sandbox_over_mcp(
    transport: str, loaded: bool, workspace: Path, tmp_path: Path
) -> None:
    """Loaded: two busy loops keep both cores busy while Claude Code starts `warden
    mcp`; Claude Code waits about 5 s for a server, so warden must have answered its
    handshake and tool listing by then (its first Task call must find the tool, not
    "No such tool available ... still connecting")."""
    assert os.geteuid() == 0, "the Claude Code test needs root for unshare -n"
    claude = differential.claude_binary()  # installed by .ci/setup (npm, pinned)
    out = tmp_path / "out.json"
    with busy_machine(BUSY_LOOPS if loaded else 0):
        proc = subprocess.run(
            ["unshare", "-n", "--", sys.executable, "-m", "tests.integration.claude_code_mcp",
             claude, str(workspace), str(tmp_path), str(out), transport],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["add"]["exit"] == 0, seen["add"]
    assert ("Added HTTP MCP server warden" in seen["add"]["stdout"]) == (transport == "http")
    assert seen["exit"] == 0, (seen["stdout"], seen["stderr"])
    parent = [r for r in seen["requests"] if r["conversation"] == "parent"]
    subagent = [r for r in seen["requests"] if r["conversation"] == "subagent"]
    # Claude Code offered warden's tool to its model ...
    offered = {t["name"] for t in parent[0]["body"]["tools"]}
    assert "mcp__warden__Task" in offered
    # ... warden's runner made the subagent's two model calls (Bash, then the answer) ...
    assert len(subagent) == 2
    # ... from a container: the file holds the sandbox's hostname, not this host's.
    written = (workspace / "proof.txt").read_text().strip()
    assert written and written != os.uname().nodename
    # ... and its answer is in Claude Code's next request, as the Task tool's result.
    results = tool_results(parent[1]["body"])
    assert len(results) == 1
    text = json.dumps(results[0]["content"])
    assert f"Task Succeeded. Result: {ANSWER}" in text
    assert not results[0].get("is_error")
    # The session ended with Claude Code: the run is recorded, nothing is left running.
    # (Claude Code kills the process it spawned half a second after it closes; the
    # session's own process ends it, so the test waits for that process, not a time.)
    wait_until_ended(tmp_path / "state")
    doc = json.loads((tmp_path / "result.json").read_text())
    assert [t["status"] for t in doc["tasks"]] == ["completed"]
    assert containers_of(doc["run_id"]) == []
