"""How a subagent's todo list (a `todos_updated` event, `runtime.todos`) reads for a
person: a count and the open items first. The text is the container's; callers
make it printable (`untrusted_text`)."""

from __future__ import annotations

from orchestrator.jsontypes import JSONObject

TODOS_EVENT = "todos_updated"
"""The event kind that carries a task's whole new list."""


def todo_count(data: JSONObject) -> str:
    """`2/5 done`, or empty for data that is not a todo list."""
    done, total = data.get("completed"), data.get("total")
    if isinstance(done, int) and isinstance(total, int):
        return f"{done}/{total} done"
    return ""


def todo_lines(data: JSONObject, limit: int = 3) -> list[str]:
    """Lines for a person: `[x]`, `[>]` (in progress) or `[ ]` and the item's text
    (its activeForm while in progress), the open items first, at most `limit`.
    The text is the container's: callers make it printable."""
    todos = data.get("todos")
    if not isinstance(todos, list):
        return []
    marks = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}
    order = {"in_progress": 0, "pending": 1, "completed": 2}
    items = [t for t in todos if isinstance(t, dict)]
    items.sort(key=lambda t: order.get(str(t.get("status")), 3))
    lines = []
    for item in items[:limit]:
        status = str(item.get("status"))
        text = item.get("activeForm") if status == "in_progress" else item.get("content")
        lines.append(f"{marks.get(status, '[?]')} {text}")
    if len(items) > limit:
        lines.append(f"… {len(items) - limit} more")
    return lines
