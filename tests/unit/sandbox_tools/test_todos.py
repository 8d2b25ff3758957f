"""TodoWrite in the runner: a list of Claude Code's items is accepted and counted;
an item with a missing, unknown or wrong field is refused with every problem named."""

from __future__ import annotations

from pathlib import Path

from sandbox_tools.tools import ToolContext, run_tool
from sandbox_tools.tools.todos import MAX_TODOS


def test_a_valid_list_is_accepted(tmp_path: Path) -> None:
    todos = [
        {"content": "Run tests", "status": "completed", "activeForm": "Running tests"},
        {"content": "Fix bug", "status": "in_progress", "activeForm": "Fixing bug"},
    ]
    out = run_tool("TodoWrite", {"todos": todos}, ToolContext(root=tmp_path))
    assert not out.is_error and out.summary == "1/2 done"


def test_bad_items_are_refused_with_every_problem(tmp_path: Path) -> None:
    todos = [
        {"content": "", "status": "done", "activeForm": "x", "owner": "me"},
        "just text",
        {"content": "a"},
    ]
    out = run_tool("TodoWrite", {"todos": todos}, ToolContext(root=tmp_path))
    assert out.is_error
    for problem in (
        "todos[0]: unknown field(s) owner",
        "todos[0].content: must be a non-empty string",
        "todos[0].status: must be one of pending, in_progress, completed",
        "todos[1]: must be an object",
        "todos[2]: missing activeForm, status",
    ):
        assert problem in out.text
    too_many = [{"content": "a", "status": "pending", "activeForm": "a"}] * (MAX_TODOS + 1)
    assert (
        "more than" in run_tool("TodoWrite", {"todos": too_many}, ToolContext(root=tmp_path)).text
    )
    assert (
        "must be an array" in run_tool("TodoWrite", {"todos": "x"}, ToolContext(root=tmp_path)).text
    )
