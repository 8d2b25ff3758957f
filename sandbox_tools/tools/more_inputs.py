"""Inputs of the tools Claude Code's agent files list beyond the file, search and
shell tools: `TaskOutput` and `TaskStop` (background shells), `NotebookEdit`,
`TodoWrite`, `WebFetch`, `WebSearch` and `Skill`, with the pinned CLI's field names (its `sdk-tools.d.ts`) and
the JSON schemas shown to the model. `inputs` joins them to the other tools.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from sandbox_tools.jsontypes import JSONObject, JSONValue
from sandbox_tools.tools.checks import CHECKS, Check

TASK_OUTPUT_DEFAULT_TIMEOUT_MS = 30_000
"""How long a blocking `TaskOutput` waits for its shell to end when it gives no timeout."""
TASK_OUTPUT_MAX_TIMEOUT_MS = 600_000
"""Longest a `TaskOutput` may wait (Claude Code's limit, 10 minutes)."""


class TaskOutputInput(NamedTuple):
    """Read what a background shell wrote since the last read."""

    task_id: str
    """The shell id `Bash` returned (`bash_1`, …)."""
    block: bool = True
    """Wait for the shell to end (up to `timeout`) before answering."""
    timeout: float = TASK_OUTPUT_DEFAULT_TIMEOUT_MS
    """Most milliseconds to wait when `block` is set."""


class TaskStopInput(NamedTuple):
    """Stop a background shell and every process it started."""

    task_id: str | None = None
    """The shell id to stop."""
    shell_id: str | None = None
    """The same, under its older name (Claude Code still takes it)."""


CellType = Literal["code", "markdown"]
EditMode = Literal["replace", "insert", "delete"]
CELL_TYPES: tuple[CellType, ...] = ("code", "markdown")
EDIT_MODES: tuple[EditMode, ...] = ("replace", "insert", "delete")


class NotebookEditInput(NamedTuple):
    """Replace, insert or delete one cell of a Jupyter notebook."""

    notebook_path: str
    """Absolute path of the `.ipynb` file, or relative to the workspace."""
    new_source: str
    """The cell's new source (ignored when deleting)."""
    cell_id: str | None = None
    """The cell to edit; when inserting, the new cell goes after it (first when absent).
    A cell without an id is named by its position, `cell-N` (0-based)."""
    cell_type: CellType | None = None
    """`code` or `markdown`; required to insert, else the cell keeps its type."""
    edit_mode: EditMode = "replace"
    """What to do with the cell."""


class WebFetchInput(NamedTuple):
    """Fetch a URL and answer a prompt about it."""

    url: str
    """The http(s) URL to fetch."""
    prompt: str
    """What to find out from the page."""


class WebSearchInput(NamedTuple):
    """Search the web through the model API's server tool."""

    query: str
    """The search query."""
    allowed_domains: list[JSONValue] | None = None
    """Only results from these domains (checked against the rules by the host)."""
    blocked_domains: list[JSONValue] | None = None
    """Never results from these domains."""


class TodoWriteInput(NamedTuple):
    """Replace the agent's todo list."""

    todos: list[JSONValue]
    """The whole new list: objects with `content`, `status`, `activeForm`."""


class SkillInput(NamedTuple):
    """Load one of the skills listed to the agent into the conversation."""

    skill: str
    """The skill's name, as listed."""
    args: str | None = None
    """Arguments for the skill (put where its text says `$ARGUMENTS`)."""


CHECKS.update(
    {
        TaskOutputInput: {
            "task_id": Check(str, min_length=1),
            "block": Check(bool),
            "timeout": Check(float, ge=0, le=TASK_OUTPUT_MAX_TIMEOUT_MS),
        },
        TaskStopInput: {
            "task_id": Check(str, min_length=1),
            "shell_id": Check(str, min_length=1),
        },
        NotebookEditInput: {
            "notebook_path": Check(str, min_length=1),
            "new_source": Check(str),
            "cell_id": Check(str),
            "cell_type": Check(str, choices=CELL_TYPES),
            "edit_mode": Check(str, choices=EDIT_MODES),
        },
        TodoWriteInput: {"todos": Check(list)},
        SkillInput: {"skill": Check(str, min_length=1), "args": Check(str)},
        WebFetchInput: {"url": Check(str, min_length=1), "prompt": Check(str, min_length=1)},
        WebSearchInput: {
            "query": Check(str, min_length=2),
            "allowed_domains": Check(list),
            "blocked_domains": Check(list),
        },
    }
)

INPUT_TYPES: dict[str, type] = {
    "TaskOutput": TaskOutputInput,
    "TaskStop": TaskStopInput,
    "NotebookEdit": NotebookEditInput,
    "TodoWrite": TodoWriteInput,
    "WebFetch": WebFetchInput,
    "WebSearch": WebSearchInput,
    "Skill": SkillInput,
}


def schema(description: str, properties: dict[str, JSONObject], required: list[str]) -> JSONObject:
    """A tool's description and closed JSON object schema."""
    return {
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": dict[str, JSONValue](properties),
            "required": list[JSONValue](required),
            "additionalProperties": False,
        },
    }


def _string(description: str) -> JSONObject:
    return {"type": "string", "description": description}


TODO_STATUSES = ("pending", "in_progress", "completed")

TOOL_SCHEMAS: dict[str, JSONObject] = {
    "TaskOutput": schema(
        "Reads the output a background shell (started by Bash with run_in_background) "
        "wrote since the last read, and whether it is still running or how it ended.",
        {
            "task_id": _string("The task ID to get output from"),
            "block": {"type": "boolean", "description": "Whether to wait for completion"},
            "timeout": {
                "type": "number",
                "description": f"Max wait time in ms (default {TASK_OUTPUT_DEFAULT_TIMEOUT_MS}, "
                f"max {TASK_OUTPUT_MAX_TIMEOUT_MS})",
            },
        },
        ["task_id"],
    ),
    "TaskStop": schema(
        "Stops a running background shell and every process it started.",
        {
            "task_id": _string("The ID of the background task to stop"),
            "shell_id": _string("Deprecated: use task_id instead"),
        },
        [],
    ),
    "NotebookEdit": schema(
        "Replaces the source of one cell of a Jupyter notebook (.ipynb), inserts a new "
        "cell after the given one, or deletes a cell.",
        {
            "notebook_path": _string(
                "The absolute path to the Jupyter notebook file to edit (must be absolute, "
                "not relative)"
            ),
            "cell_id": _string(
                "The ID of the cell to edit. When inserting a new cell, the new cell will be "
                "inserted after the cell with this ID, or at the beginning if not specified."
            ),
            "new_source": _string("The new source for the cell"),
            "cell_type": {
                "type": "string",
                "enum": list[JSONValue](CELL_TYPES),
                "description": "The type of the cell (code or markdown). If not specified, it "
                "defaults to the current cell type. If using edit_mode=insert, this is required.",
            },
            "edit_mode": {
                "type": "string",
                "enum": list[JSONValue](EDIT_MODES),
                "description": "The type of edit to make (replace, insert, delete). "
                "Defaults to replace.",
            },
        },
        ["notebook_path", "new_source"],
    ),
    "WebFetch": schema(
        "Fetches a URL (through this sandbox's network egress, which decides each host), "
        "converts HTML to Markdown, and answers the prompt about its content with a model "
        "call. A redirect to another host is reported, not followed: fetch the new URL in "
        "another call. Only works when the run gives this agent network egress.",
        {
            "url": {
                "type": "string",
                "format": "uri",
                "description": "The URL to fetch content from",
            },
            "prompt": _string("The prompt to run on the fetched content"),
        },
        ["url", "prompt"],
    ),
    "WebSearch": schema(
        "Searches the web (the model API's web search, decided by this run's rules and "
        "egress) and returns the result links and a short summary. Only works when the "
        "run allows WebSearch for this agent.",
        {
            "query": {"type": "string", "minLength": 2, "description": "The search query to use"},
            "allowed_domains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only include search results from these domains",
            },
            "blocked_domains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Never include search results from these domains",
            },
        },
        ["query"],
    ),
    "TodoWrite": schema(
        "Replaces your todo list for this task (shown to the person running it). Use it "
        "to plan and track multi-step work: one item in_progress at a time.",
        {
            "todos": {
                "type": "array",
                "description": "The updated todo list",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1},
                        "status": {"type": "string", "enum": list[JSONValue](TODO_STATUSES)},
                        "activeForm": {"type": "string", "minLength": 1},
                    },
                    "required": ["content", "status", "activeForm"],
                    "additionalProperties": False,
                },
            }
        },
        ["todos"],
    ),
    "Skill": schema(
        "Loads a skill into this conversation: its instructions come back with the result, "
        "and you follow them. The skills you may load are listed at the start of the "
        "conversation (name: what it is for). When one matches your task, load it "
        "before doing the task; only load a listed skill, never a guessed name, and not "
        "one already loaded.",
        {
            "skill": _string(
                "The name of a skill from the available-skills list. Do not guess names."
            ),
            "args": _string("Optional arguments for the skill"),
        },
        ["skill"],
    ),
}
