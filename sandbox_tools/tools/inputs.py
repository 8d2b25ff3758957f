"""Tool inputs with Claude Code's names and fields, and the JSON schemas shown to the model.

Each tool has a closed pydantic model that validates what the model sent and a
hand-written JSON schema (Claude Code's wording) in `TOOL_SCHEMAS`; a unit test
checks that the two list the same fields, so they cannot drift.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BASH_MAX_TIMEOUT_MS = 600_000
"""Longest timeout a Bash call may ask for (Claude Code's limit, 10 minutes)."""


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class BashInput(_Input):
    """Run a shell command in the workspace."""

    command: str = Field(min_length=1)
    """The command, run with `bash -c`."""
    timeout: float | None = Field(default=None, gt=0, le=BASH_MAX_TIMEOUT_MS)
    """Timeout in milliseconds; the agent's default when absent."""
    description: str | None = None
    """What the command does, in a few words (shown in progress)."""


class ReadInput(_Input):
    """Read a text file with numbered lines."""

    file_path: str
    """Absolute path, or relative to the workspace."""
    offset: int | None = Field(default=None, ge=0)
    """Line number to start at (1-based; 0 is read as 1)."""
    limit: int | None = Field(default=None, ge=1)
    """How many lines to read."""


class WriteInput(_Input):
    """Create or overwrite a file."""

    file_path: str
    """Absolute path, or relative to the workspace."""
    content: str
    """The whole new content."""


class EditInput(_Input):
    """Replace an exact string in a file."""

    file_path: str
    """Absolute path, or relative to the workspace."""
    old_string: str
    """The exact text to replace."""
    new_string: str
    """The text to put in its place."""
    replace_all: bool = False
    """Replace every occurrence instead of requiring exactly one."""


class GlobInput(_Input):
    """Find files by glob pattern."""

    pattern: str = Field(min_length=1)
    """A glob such as `**/*.py` or `src/*.{ts,tsx}`."""
    path: str | None = None
    """Directory to search in; the workspace when absent."""


GrepOutputMode = Literal["content", "files_with_matches", "count"]


class GrepInput(_Input):
    """Search file contents with a regular expression."""

    pattern: str = Field(min_length=1)
    """A Python regular expression."""
    path: str | None = None
    """File or directory to search; the workspace when absent."""
    glob: str | None = None
    """Only files matching this glob (matched against the name when it has no `/`)."""
    output_mode: GrepOutputMode = "files_with_matches"
    """What to show: matching lines, file names, or counts per file."""
    case_insensitive: bool = Field(default=False, alias="-i")
    """Ignore case."""
    line_numbers: bool = Field(default=True, alias="-n")
    """Show line numbers (content mode)."""
    after: int | None = Field(default=None, ge=0, alias="-A")
    """Lines of context after each match (content mode)."""
    before: int | None = Field(default=None, ge=0, alias="-B")
    """Lines of context before each match (content mode)."""
    context: int | None = Field(default=None, ge=0, alias="-C")
    """Lines of context before and after each match (content mode)."""
    head_limit: int | None = Field(default=None, ge=1)
    """Show only the first N lines or entries."""


class TaskInput(_Input):
    """Delegate a task to a subagent (carried out by the host)."""

    description: str = Field(min_length=1)
    """A short (3-5 word) description of the task."""
    prompt: str = Field(min_length=1)
    """The task for the agent to perform."""
    subagent_type: str = Field(min_length=1)
    """The type of agent to use."""
    max_turns: int | None = Field(default=None, ge=1)
    """Most model calls the subagent may make."""
    run_in_background: bool | None = None
    """Start the task without waiting for it."""
    session_id: str | None = None
    """Resume an earlier task's session."""


INPUT_MODELS: dict[str, type[_Input]] = {
    "Bash": BashInput,
    "Read": ReadInput,
    "Write": WriteInput,
    "Edit": EditInput,
    "Glob": GlobInput,
    "Grep": GrepInput,
    "Task": TaskInput,
}


def _schema(
    description: str, properties: dict[str, dict[str, Any]], required: list[str]
) -> dict[str, Any]:
    return {
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


def _path_prop(what: str) -> dict[str, Any]:
    return {"type": "string", "description": f"The absolute path to the {what}"}


TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "Bash": _schema(
        "Executes a bash command in the workspace directory and returns its combined "
        "stdout and stderr and its exit code. Each call starts a fresh shell; processes "
        "it leaves running in the background are stopped when the command finishes.",
        {
            "command": {"type": "string", "description": "The command to execute"},
            "timeout": {
                "type": "number",
                "description": f"Optional timeout in milliseconds (max {BASH_MAX_TIMEOUT_MS})",
            },
            "description": {
                "type": "string",
                "description": "Clear, concise description of what this command does in 5-10 words",
            },
        },
        ["command"],
    ),
    "Read": _schema(
        "Reads a text file from the workspace. Lines are numbered like `cat -n`, starting "
        "at 1. By default reads up to 2000 lines from the start; use offset and limit for "
        "other parts of long files. Long lines are truncated.",
        {
            "file_path": _path_prop("file to read"),
            "offset": {
                "type": "number",
                "description": "The line number to start reading from",
            },
            "limit": {"type": "number", "description": "The number of lines to read"},
        },
        ["file_path"],
    ),
    "Write": _schema(
        "Writes a file in the workspace, overwriting it if it exists and creating parent "
        "directories as needed.",
        {
            "file_path": _path_prop("file to write (must be absolute, not relative)"),
            "content": {"type": "string", "description": "The content to write to the file"},
        },
        ["file_path", "content"],
    ),
    "Edit": _schema(
        "Performs an exact string replacement in a file. Fails if old_string is not "
        "found, or is found more than once and replace_all is not set.",
        {
            "file_path": _path_prop("file to modify"),
            "old_string": {"type": "string", "description": "The text to replace"},
            "new_string": {
                "type": "string",
                "description": "The text to replace it with (must be different from old_string)",
            },
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace all occurrences of old_string (default false)",
            },
        },
        ["file_path", "old_string", "new_string"],
    ),
    "Glob": _schema(
        "Fast file pattern matching (`**/*.js`, `src/**/*.{ts,tsx}`). Returns matching "
        "file paths sorted by modification time, newest first.",
        {
            "pattern": {"type": "string", "description": "The glob pattern to match files against"},
            "path": {
                "type": "string",
                "description": "The directory to search in. Omit it to search the workspace.",
            },
        },
        ["pattern"],
    ),
    "Grep": _schema(
        "Searches file contents with a regular expression (Python `re` syntax). Binary "
        "files are skipped.",
        {
            "pattern": {
                "type": "string",
                "description": "The regular expression pattern to search for in file contents",
            },
            "path": {
                "type": "string",
                "description": "File or directory to search in. Defaults to the workspace.",
            },
            "glob": {
                "type": "string",
                "description": 'Glob pattern to filter files (e.g. "*.js", "*.{ts,tsx}")',
            },
            "output_mode": {
                "type": "string",
                "enum": ["content", "files_with_matches", "count"],
                "description": 'Output mode: "content" shows matching lines, '
                '"files_with_matches" shows file paths (default), "count" shows match counts',
            },
            "-i": {"type": "boolean", "description": "Case insensitive search"},
            "-n": {
                "type": "boolean",
                "description": 'Show line numbers in output (output_mode "content"; default true)',
            },
            "-A": {
                "type": "number",
                "description": 'Number of lines to show after each match (output_mode "content")',
            },
            "-B": {
                "type": "number",
                "description": 'Number of lines to show before each match (output_mode "content")',
            },
            "-C": {
                "type": "number",
                "description": "Number of lines to show before and after each match "
                '(output_mode "content")',
            },
            "head_limit": {
                "type": "number",
                "description": "Limit output to the first N lines or entries",
            },
        },
        ["pattern"],
    ),
    "Task": _schema(
        "Launch a new agent to handle a task autonomously. It starts with a fresh "
        "conversation, so the prompt must contain everything it needs; only its final "
        "answer comes back.",
        {
            "description": {
                "type": "string",
                "description": "A short (3-5 word) description of the task",
            },
            "prompt": {"type": "string", "description": "The task for the agent to perform"},
            "subagent_type": {
                "type": "string",
                "description": "The type of specialized agent to use for this task",
            },
            "max_turns": {
                "type": "number",
                "description": "Optional limit on the agent's model calls",
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Set to true to run this agent in the background",
            },
            "session_id": {
                "type": "string",
                "description": "Optional session id of an earlier task to resume",
            },
        },
        ["description", "prompt", "subagent_type"],
    ),
}


def tool_params(names: list[str]) -> list[dict[str, Any]]:
    """The `tools` parameter of a Messages API call for these tool names, in order."""
    return [{"name": name, **TOOL_SCHEMAS[name]} for name in names if name in TOOL_SCHEMAS]
