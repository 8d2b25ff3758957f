"""A change review through `warden mcp`, end to end: the `mcp` SDK's client calls Task
with `isolation: worktree` over stdio, the subagent edits its working copy in a real
sandbox, and the review comes to the client as elicitation (the change set's hash,
the diff, a markup name and an escape-laden line shown escaped); the client's
"apply change set SHA" applies exactly that change set to the workspace, and a
"do not apply" leaves the workspace as it was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest

from orchestrator.config import Settings
from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import UNPRIVILEGED
from tests.integration.harness import text, tool
from tests.integration.test_mcp_server import API_KEY, stdio_session, subagent
from tests.integration.test_review_end_to_end import (
    HOSTILE_CONTENT,
    HOSTILE_NAME,
    SHOWN_LINE,
    WRITE_HOSTILE,
)

pytestmark = pytest.mark.integration

SCRIPT = Script.model_validate(
    {"conversations": [subagent("EDIT-COPY", [tool("Bash", command=WRITE_HOSTILE)], [text("ok")])]}
)


class Reviewer:
    """Answers a review by picking the decision offered at `pick` (0: apply)."""

    def __init__(self, pick: int) -> None:
        self.pick = pick
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        choices = params.requested_schema["properties"]["decision"]["enum"]
        return types.ElicitResult(action="accept", content={"decision": choices[self.pick]})


@pytest.mark.parametrize("pick", [0, 1])
async def test_a_review_by_elicitation_applies_exactly_what_was_shown(
    settings: Settings, workspace: Path, pick: int
) -> None:
    app = workspace / "app.py"
    app.write_text("one\ntwo\nthree\n")
    if os.geteuid() == 0:
        os.chown(app, UNPRIVILEGED, UNPRIVILEGED)
    reviewer = Reviewer(pick)
    with ScriptedModelServer(SCRIPT, expected_api_key=API_KEY).in_thread() as server:
        async with stdio_session(
            settings, server, workspace, "--permission-mode", "bypassPermissions",
            elicitation_callback=reviewer,
        ) as session:  # fmt: skip
            done = await session.call_tool(
                "Task",
                {
                    "description": "edit", "prompt": "EDIT-COPY", "subagent_type": "general-purpose",
                    "isolation": "worktree",
                },
            )  # fmt: skip
    assert not done.is_error, done
    (params,) = reviewer.asked
    decision = params.requested_schema["properties"]["decision"]["enum"]
    sha = decision[0].removeprefix("apply change set ")
    assert len(sha) == 64 and f"Change set {sha}" in params.message
    assert f"── {HOSTILE_NAME}" in params.message and f"│{SHOWN_LINE}" in params.message
    assert "\x1b" not in params.message and "\u202e" not in params.message
    if pick == 0:
        assert (workspace / HOSTILE_NAME).read_text() == HOSTILE_CONTENT
        assert app.read_text() == "one\nTWO\nthree\n"
    else:
        assert not (workspace / HOSTILE_NAME).exists()
        assert app.read_text() == "one\ntwo\nthree\n"
