"""A subagent's todo list (Claude Code's `TodoWrite`), kept by the host per task.

The runner checks the list for the model's sake; the host checks it again here,
as it checks everything from a container (closed models, bounded), when the gate
has allowed the call. The whole list becomes a `todos_updated` event of its task,
so it is stored with the run's events and shown by `warden logs`, `warden ps`,
the terminal progress view and the run's page, always as untrusted text.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.jsontypes import JSONLike, JSONObject
from orchestrator.results.todos import TODOS_EVENT

__all__ = ["TODOS_EVENT", "TodoList", "event_data", "parse_todos"]

MAX_TODOS = 100
"""Most items a todo list may hold (the runner's `todos.MAX_TODOS`)."""
MAX_TODO_CHARS = 500
"""Longest `content` or `activeForm` of one item."""


TodoStatus = Literal["pending", "in_progress", "completed"]


class TodoItem(BaseModel):
    """One item, with Claude Code's fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str = Field(min_length=1, max_length=MAX_TODO_CHARS)
    """What is to be done."""
    status: TodoStatus
    """Where it stands."""
    activeForm: str = Field(min_length=1, max_length=MAX_TODO_CHARS)
    """The same, as what is being done (`Running the tests`)."""


class TodoList(BaseModel):
    """A `TodoWrite` input: the whole new list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    todos: list[TodoItem] = Field(max_length=MAX_TODOS)
    """The items, in the agent's order."""


def parse_todos(tool_input: JSONObject) -> TodoList | str:
    """The checked list, or why it is refused (one line)."""
    try:
        return TodoList.model_validate(tool_input)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"the todo list is invalid ({e.error_count()} problem(s); {where}: {first['msg']})"


def event_data(todos: TodoList) -> dict[str, JSONLike]:
    """The `todos_updated` event's data: the list and its counts."""
    items: list[JSONLike] = [item.model_dump() for item in todos.todos]
    done = sum(1 for item in todos.todos if item.status == "completed")
    return {"todos": items, "completed": done, "total": len(todos.todos)}
