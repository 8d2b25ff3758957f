"""The person's own MCP servers, end to end in real sandboxes with the scripted model:
a user-scope server of `~/.claude.json` and a local-scope one (its
`projects[<workspace>]` entry) start inside the subagent's own container, never on
the host, beside the workspace's `.mcp.json` ones (local beating project for one
name); one whose `env` holds a value is not started; an enterprise's
`managed-mcp.json` takes exclusive control (only its servers start)."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import uuid
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.runtime.tasks import TaskStatus
from tests.integration.harness import convo, scripted_run, text, tool
from tests.integration.test_mcp_servers import (
    offered,
    probe_in,
    server,
    task,
    tool_results,
    write_mcp_json,
)

pytestmark = pytest.mark.integration


def own_server(marker: str) -> dict[str, object]:
    """A probe server with no `env` (the person's servers carry no private values)."""
    script = (
        f"touch /workspace/started-{marker}; "
        f"PROBE_MARKER={marker} exec python3 /workspace/tools/probe.py"
    )
    return {"command": "bash", "args": ["-c", script]}


def write_claude_json(settings: Settings, workspace: Path, doc: dict[str, object]) -> None:
    # the tests' claude_dir is not named `.claude`: Claude Code's CLAUDE_CONFIG_DIR form
    (settings.claude_dir / ".claude.json").parent.mkdir(parents=True, exist_ok=True)
    (settings.claude_dir / ".claude.json").write_text(json.dumps(doc))


async def test_the_persons_servers_start_inside_the_sandbox(
    settings: Settings, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = uuid.uuid4().hex[:10]
    probe_in(workspace)
    write_mcp_json(workspace, {"both": server(f"project{marker}")})
    write_claude_json(settings, workspace, {
        "mcpServers": {"mine": own_server(f"user{marker}"),
                       "secret": {"command": "python3", "args": ["/workspace/tools/probe.py"],
                                  "env": {"API_TOKEN": "tok-" + marker}}},
        "projects": {str(workspace): {"mcpServers": {"both": own_server(f"local{marker}")}}},
    })  # fmt: skip
    script = [
        convo("child", {"prompt_contains": "PERSON-MCP"},
              [tool("mcp__mine__where")], [tool("mcp__both__where")], [text("done")]),
    ]  # fmt: skip
    caplog.set_level(logging.WARNING)
    async with scripted_run(settings, workspace, script) as (run, model):
        result = await run.manager.run_task(task("PERSON-MCP"))

    assert result.status is TaskStatus.COMPLETED, result
    assert {n.split("__")[1] for n in offered(model, "child")} == {"mine", "both"}
    mine, both = (json.loads(r) for r in tool_results(model, "child"))
    # the user's server ran in the subagent's container: its hostname, only `lo`
    assert mine["hostname"] != socket.gethostname() and mine["interfaces"] == ["lo"]
    assert mine["marker"] == f"user{marker}" and mine["cwd"] == "/workspace"
    assert both["marker"] == f"local{marker}"  # local scope beats the project's
    assert (workspace / f"started-user{marker}").exists()
    assert not (workspace / f"started-project{marker}").exists()
    # the server with a private value was not started, and the value is nowhere
    assert "'secret' not started: its `env`/`headers` (API_TOKEN)" in caplog.text
    bodies = json.dumps([r.body for r in model.requests])
    assert "tok-" + marker not in bodies


async def test_a_managed_file_allows_only_its_servers(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex[:10]
    probe_in(workspace)
    write_mcp_json(workspace, {"proj": server(f"project{marker}")})
    write_claude_json(settings, workspace, {"mcpServers": {"mine": own_server(f"user{marker}")}})
    etc = tmp_path / "etc-claude-code"
    etc.mkdir()
    (etc / "managed-mcp.json").write_text(
        json.dumps({"mcpServers": {"corp": own_server(f"managed{marker}")}})
    )
    managed = dataclasses.replace(settings, claude_managed_settings=etc / "managed-settings.json")
    script = [convo("child", {"prompt_contains": "MANAGED-MCP"}, [text("done")])]
    async with scripted_run(managed, workspace, script) as (run, model):
        result = await run.manager.run_task(task("MANAGED-MCP"))

    assert result.status is TaskStatus.COMPLETED, result
    assert {n.split("__")[1] for n in offered(model, "child")} == {"corp"}
    assert (workspace / f"started-managed{marker}").exists()
    assert not (workspace / f"started-user{marker}").exists()
    assert not (workspace / f"started-project{marker}").exists()
