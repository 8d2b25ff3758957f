"""Faults at the edges, injected for real and answered without losing anything: a
model whose tool input is not an object (the parent answers with an error it can act
on, and the run goes on), a sandbox killed or stopped from outside (`docker kill`,
`docker stop`: reported as killed from outside, by whom when the engine says), and a
workspace whose file system is full or read-only (Write and Edit keep every file
whole and say what happened)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.integration.harness import PARENT_MATCH, convo, requests_of, scripted_run, text

pytestmark = pytest.mark.integration


async def test_a_tool_input_that_is_a_string_gets_an_error_result_and_the_run_goes_on(
    settings: Settings, workspace: Path
) -> None:
    malformed = {"type": "tool_use", "name": "Task", "input": '{"prompt": "cut off'}
    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [malformed],
            [text("parent saw: {last_tool_result}")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.parent.run("go")
    assert "parent saw: Invalid Task call: its input must be a JSON object" in result.text
    assert "it was not run" in result.text
    second = requests_of(server, "parent")[1].body["messages"]
    [echoed] = [b for b in second[1]["content"] if b["type"] == "tool_use"]
    assert echoed["input"] == {}  # what the API accepts; the string was not sent back
    assert not run.manager.tasks
