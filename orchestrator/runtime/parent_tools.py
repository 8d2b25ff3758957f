"""The parent's tools (`Task`, `TaskOutput`, `TaskStop`): one pydantic model per
tool input, and the JSON schemas the model sees, generated from those models so the
two cannot drift."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.runtime.tasks import TaskInput
from orchestrator.schema_docs import documented

TASK_ID_WARNING = (
    "A task exists only if a Task call in this conversation returned its id; ids from "
    "earlier runs or conversations belong to old tasks and find nothing."
)
DEFAULT_OUTPUT_TIMEOUT_MS = 30_000
MAX_OUTPUT_TIMEOUT_MS = 600_000


class TaskOutputInput(BaseModel):
    """The `TaskOutput` tool's input."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    task_id: str = Field(max_length=100)
    """The id a Task call returned."""
    block: bool = True
    """Wait for it to finish (default true)."""
    timeout: float = Field(default=DEFAULT_OUTPUT_TIMEOUT_MS, ge=0)
    """Longest wait in milliseconds (default 30000; at most 600000)."""


class TaskStopInput(BaseModel):
    """The `TaskStop` tool's input."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=documented)

    task_id: str = Field(max_length=100)
    """The id of the background task to stop."""


def input_schema(model: type[BaseModel]) -> JSONObject:
    """`model`'s JSON schema as a tool `input_schema`: no titles or defaults, and an
    optional field is just its type (the model may leave it out). The model's own
    docstring is for developers and stays out."""
    schema = _clean(model.model_json_schema())
    assert isinstance(schema, dict)
    schema.pop("description", None)
    return schema


def _clean(node: JSONValue) -> JSONValue:
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    variants = node.get("anyOf")
    if isinstance(variants, list):
        concrete = [v for v in variants if v != {"type": "null"}]
        if len(concrete) == 1 and len(concrete) < len(variants):
            merged = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
            first = concrete[0] if isinstance(concrete[0], dict) else {}
            return _clean({**first, **merged})
    return {k: _clean(v) for k, v in node.items() if k not in ("title", "default")}


FORK_NOTE = (
    "\n\nFork mode: with fork: true the subagent starts from this whole conversation "
    "instead of a fresh one (cheaper: it reuses the cached prompt) and the prompt is its "
    "directive; it runs the tools listed after TaskStop in its own sandbox. You cannot "
    "run those tools yourself."
)


MAX_AGENT_LISTING_CHARS = 8_000
"""Budget of the Task description's agent list: every turn sends it, so a large agent
library must not cost tens of thousands of tokens a turn."""
MAX_AGENT_LINE_CHARS = 240
"""Longest line of one agent type: its name and the start of its description's first
line (cut, marked `…`)."""


def agent_listing(agents: list[tuple[str, str]]) -> list[str]:
    """`- name: description` lines for (name, description) pairs in the given order,
    within MAX_AGENT_LISTING_CHARS: past the budget the rest are listed by name only,
    and past that counted, so every type stays callable by its name."""
    lines: list[str] = []
    used = 0
    rest: list[str] = []
    for name, description in agents:
        first = " ".join((description.strip().splitlines() or [""])[0].split())
        line = f"- {name}: {first}"
        if len(line) > MAX_AGENT_LINE_CHARS:
            line = line[: MAX_AGENT_LINE_CHARS - 1] + "…"
        if not rest and used + len(line) + 1 <= MAX_AGENT_LISTING_CHARS * 3 // 4:
            lines.append(line)
            used += len(line) + 1
        else:
            rest.append(name)
    if rest:
        names: list[str] = []
        for name in rest:
            if used + len(name) + 2 > MAX_AGENT_LISTING_CHARS:
                break
            names.append(name)
            used += len(name) + 2
        more = len(rest) - len(names)
        line = f"- {len(rest)} more types (use them by name): {', '.join(names)}"
        if more:
            line += f", and {more} more (an unknown subagent_type's error lists them all)"
        lines.append(line)
    return lines


def tool_schemas(agent_lines: list[str], *, fork: bool = False) -> list[JSONObject]:
    """The parent's tools, with Claude Code's names and input schemas (`fork`: the
    Task description tells of fork mode; without it the `fork` field is not offered)."""
    task_schema = input_schema(TaskInput)
    # Shown closed, as Claude Code shows it; a call with other fields still runs
    # (they are ignored with a `task_warning` event, as Claude Code ignores them).
    task_schema["additionalProperties"] = False
    if not fork:
        properties = task_schema.get("properties")
        if isinstance(properties, dict):
            properties.pop("fork", None)
    return [
        {
            "name": "Task",
            "description": (
                "Launch a subagent in its own sandboxed container to carry out a task. It "
                "sees only your prompt (not this conversation) and returns only its final "
                "answer. With run_in_background it returns a task id at once and you are "
                "notified when it finishes (no need to poll). Pass session_id (a task id "
                "from an earlier Task result) to continue that subagent's conversation.\n\n"
                "Available agent types:\n" + "\n".join(agent_lines) + (FORK_NOTE if fork else "")
            ),
            "input_schema": task_schema,
        },
        {
            "name": "TaskOutput",
            "description": (
                "Get the status and result of a background task, optionally waiting for it. "
                + TASK_ID_WARNING
            ),
            "input_schema": input_schema(TaskOutputInput),
        },
        {
            "name": "TaskStop",
            "description": (
                "Stop a running background task (and every subagent it started): its "
                "container is killed; its partial transcript is kept. " + TASK_ID_WARNING
            ),
            "input_schema": input_schema(TaskStopInput),
        },
    ]
