"""TodoWrite: the agent's todo list for this task.

The list itself is kept by the host: the whole new list travels in the permission
request, and the host records it (checked, bounded) when it allows the call, so
the person running the task sees it (`warden ps`, `warden logs`, the progress
view, the run's page). Here the items are checked as Claude Code's schema says,
so the model learns at once what was wrong.
"""

from __future__ import annotations

from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject, JSONValue
from sandbox_tools.tools.base import ToolContext, ToolOutput
from sandbox_tools.tools.more_inputs import TODO_STATUSES, TodoWriteInput

MAX_TODOS = 100
"""Most items a todo list may hold (the host refuses longer lists too)."""
MAX_TODO_CHARS = 500
"""Longest `content` or `activeForm` of one item."""

_KEYS = frozenset({"content", "status", "activeForm"})


def check_todos(todos: list[JSONValue]) -> list[JSONObject]:
    """The items, each checked; a ToolError listing every problem."""
    if len(todos) > MAX_TODOS:
        raise ToolError(f"the todo list has {len(todos)} items, more than {MAX_TODOS}")
    problems: list[str] = []
    items: list[JSONObject] = []
    for i, item in enumerate(todos):
        if not isinstance(item, dict):
            problems.append(f"todos[{i}]: must be an object")
            continue
        extra = sorted(set(item) - _KEYS)
        missing = sorted(_KEYS - set(item))
        if extra:
            problems.append(f"todos[{i}]: unknown field(s) {', '.join(extra)}")
        if missing:
            problems.append(f"todos[{i}]: missing {', '.join(missing)}")
        for key in ("content", "activeForm"):
            value = item.get(key)
            if key in item and (not isinstance(value, str) or not value.strip()):
                problems.append(f"todos[{i}].{key}: must be a non-empty string")
            elif isinstance(value, str) and len(value) > MAX_TODO_CHARS:
                problems.append(f"todos[{i}].{key}: longer than {MAX_TODO_CHARS} characters")
        if "status" in item and item.get("status") not in TODO_STATUSES:
            problems.append(f"todos[{i}].status: must be one of {', '.join(TODO_STATUSES)}")
        items.append(item)
    if problems:
        raise ToolError(f"invalid input for TodoWrite: {'; '.join(problems)}")
    return items


def todo_write(inp: TodoWriteInput, ctx: ToolContext) -> ToolOutput:
    items = check_todos(inp.todos)
    done = sum(1 for item in items if item.get("status") == "completed")
    return ToolOutput(
        "Todos have been modified successfully. Ensure that you continue to use the todo "
        "list to track your progress. Please proceed with the current tasks if applicable.",
        summary=f"{done}/{len(items)} done",
    )
