"""A skill's `allowed-tools` hold for the calls after the Skill call in the same
model response, and no longer, as in the pinned Claude Code (measured): a real run
(engine, runner, broker, gate, scripted model) whose subagent loads a skill that
allows `mkdir` and makes one `mkdir` in that response and one in the next; only
the first runs (the second is a question, and a run with nobody to ask denies it)."""

from __future__ import annotations

import json
import os
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
)
from tests.integration.project_fixtures import chown_tree

pytestmark = pytest.mark.integration

SKILL = "---\ndescription: Makes directories\nallowed-tools: Bash(mkdir:*)\n---\nMake them.\n"


def _lay_out(ws: Path) -> None:
    files = {
        ".claude/skills/mk/SKILL.md": SKILL,
        ".claude/settings.json": json.dumps({"permissions": {"allow": ["Skill(mk)"]}}),
    }
    for rel, content in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(content)
    chown_tree(ws)


async def test_a_skills_allowed_tools_last_for_the_response_that_loaded_it(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    _lay_out(ws)
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "config",
                        claude_dir=tmp_path / "claude")  # fmt: skip
    script = [
        convo("parent", PARENT_MATCH, [task("SKILLCHILD make dirs")], [text("parent done")]),
        convo(
            "child",
            {"prompt_contains": "SKILLCHILD"},
            [tool("Skill", skill="mk"), tool("Bash", command="mkdir made_in_batch")],
            [tool("Bash", command="mkdir made_later")],
            [text("child done")],
        ),
    ]
    async with scripted_run(settings, ws, script, mode="default") as (run, server):
        await run.parent.run("delegate it")
    child = requests_of(server, "child")
    assert len(child) == 3, [r.body for r in child]
    loaded = child[1].body["messages"][-1]["content"]
    assert loaded[0]["content"] == "Launching skill: mk"
    assert not loaded[1].get("is_error"), loaded[1]  # the mkdir in the same response ran
    later = child[2].body["messages"][-1]["content"][0]
    assert later["is_error"] and "denied" in str(later["content"]).lower(), later
    assert (ws / "made_in_batch").is_dir()
    assert not (ws / "made_later").exists()
