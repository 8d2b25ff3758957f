"""An agent with Claude Code's `memory: project` keeps its memory from one task to the
next: its own memory directory is writable inside its real sandbox (the rest of
`.claude`, another agent's memory and hard links into it are not), its writes are
allowed without a question as Claude Code allows them, the next task's prompt holds
what it saved, and a link the sandbox plants in its memory is never followed by the
host. Real engine, images, runner and broker; only the model is scripted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.integration.harness import (
    PARENT_MATCH,
    convo,
    requests_of,
    scripted_run,
    task,
    text,
    tool,
    write_agent,
)

pytestmark = pytest.mark.integration

MEMORY = "/workspace/.claude/agent-memory/keeper"
AGENT = (
    "---\nname: keeper\ndescription: Remembers things\nmemory: project\ntools: Bash\n"
    "---\nYou are KEEPERBODY.\n"
)
ATTEMPTS = (  # a script: what it does is tried in the sandbox, not asked about
    f"echo detail > {MEMORY}/fact.md && echo FACT-SAVED; "
    "touch /workspace/.claude/settings.json 2>/dev/null || echo SETTINGS-READ-ONLY; "
    "mkdir /workspace/.claude/agent-memory/other 2>/dev/null || echo OTHER-READ-ONLY; "
    f"ln /workspace/README.md {MEMORY}/linked.md 2>&1 | grep -q 'cross-device' "
    "&& echo HARD-LINK-REFUSED; "
    f"mv {MEMORY} /workspace/.claude/agent-memory/moved 2>/dev/null || echo DIR-STAYS"
)


def _system(body: dict[str, object]) -> str:
    return json.dumps(body.get("system"))


async def test_memory_is_written_in_the_sandbox_and_read_back_without_links(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    write_agent(workspace, "keeper", AGENT)
    (workspace / "README.md").write_text("hello\n")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-4242\n")
    script = [
        convo(
            "parent", PARENT_MATCH,
            [task("SAVE-IT", "keeper")], [task("READ-IT", "keeper")],
            [task("CHECK-IT", "keeper")], [text("parent done")],
        ),
        convo(
            "save", {"prompt_contains": "SAVE-IT"},
            [tool("Write", file_path=f"{MEMORY}/MEMORY.md",
                  content="- [Fact](fact.md) - MEMFACT-7781\n")],
            [tool("Write", file_path="/workspace/attempts.sh", content=ATTEMPTS)],
            [tool("Bash", command="sh /workspace/attempts.sh")],
            [text("saved")],
        ),
        convo(
            "read", {"prompt_contains": "READ-IT"},
            [tool("Write", file_path="/workspace/plant.sh",
                  content=f"rm {MEMORY}/MEMORY.md && ln -s {secret} {MEMORY}/MEMORY.md "
                          "&& echo PLANTED")],
            [tool("Bash", command="sh /workspace/plant.sh")],
            [text("planted")],
        ),
        convo("check", {"prompt_contains": "CHECK-IT"}, [text("checked")]),
    ]  # fmt: skip
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.parent.run("remember")
    assert result.text == "parent done"

    # the save task: its Write was allowed (no question) and landed on the host
    host_memory = workspace / ".claude" / "agent-memory" / "keeper"
    assert (host_memory / "fact.md").read_text() == "detail\n"
    assert host_memory.stat().st_uid == workspace.stat().st_uid
    save = requests_of(server, "save")
    [written] = [b for b in save[1].body["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert not written.get("is_error"), written
    out = json.dumps(save[3].body["messages"][-1])
    for marker in ("FACT-SAVED", "SETTINGS-READ-ONLY", "OTHER-READ-ONLY", "HARD-LINK-REFUSED",
                   "DIR-STAYS"):  # fmt: skip
        assert marker in out, f"{marker} missing from {out}"
    assert not (workspace / ".claude" / "settings.json").exists()
    assert not (workspace / ".claude" / "agent-memory" / "other").exists()

    # the next task of the agent reads what was saved
    read = requests_of(server, "read")
    assert "MEMFACT-7781" in _system(read[0].body)
    assert "KEEPERBODY" in _system(read[0].body)
    assert "PLANTED" in json.dumps(read[2].body["messages"][-1])

    # the link it planted in place of MEMORY.md is not followed by the host
    assert (host_memory / "MEMORY.md").is_symlink()
    check = _system(requests_of(server, "check")[0].body)
    assert "HOST-SECRET-4242" not in check
    assert "no memories yet" in check
