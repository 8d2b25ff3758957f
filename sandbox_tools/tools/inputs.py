"""Tool inputs with Claude Code's names and fields, and the JSON schemas shown to the model.

Each tool's input is a named tuple, its fields' checks in `checks.CHECKS` (how
they are checked: `checks`). `TOOL_SCHEMAS` holds the hand-written JSON schemas
(Claude Code's wording); a unit test checks that they list the same fields as the
input types. This module declares the file, search, shell and Task tools; the
tools added for Claude Code's agent files (background shells, notebooks, the todo
list) are declared in `more_inputs` and joined here, so `INPUT_TYPES` and
`TOOL_SCHEMAS` name every tool once.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.tools import more_inputs
from sandbox_tools.tools.checks import CHECKS, Check, dump, input_fields, parse
from sandbox_tools.tools.more_inputs import schema as _schema

TASK_MODELS = ("sonnet", "opus", "haiku", "inherit")
TASK_MODES = ("acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "plan")
TASK_ISOLATIONS = ("worktree", "remote")
"""The Task input's choices (`orchestrator.runtime.tasks` holds the same; a unit
test keeps them equal)."""

BASH_MAX_TIMEOUT_MS = 600_000
"""Longest timeout a Bash call may ask for (Claude Code's limit, 10 minutes)."""


class BashInput(NamedTuple):
    """Run a shell command in the workspace."""

    command: str
    """The command, run with `bash -c`."""
    timeout: float | None = None
    """Timeout in milliseconds; the agent's default when absent."""
    description: str | None = None
    """What the command does, in a few words (shown in progress)."""
    run_in_background: bool | None = None
    """Start it and return its shell id at once (`TaskOutput` reads it, `TaskStop`
    ends it); it runs until it exits, is stopped, or the sandbox ends."""


class ReadInput(NamedTuple):
    """Read a text file with numbered lines."""

    file_path: str
    """Absolute path, or relative to the workspace."""
    offset: int | None = None
    """Line number to start at (1-based; 0 is read as 1)."""
    limit: int | None = None
    """How many lines to read."""


class WriteInput(NamedTuple):
    """Create or overwrite a file."""

    file_path: str
    """Absolute path, or relative to the workspace."""
    content: str
    """The whole new content."""


class EditInput(NamedTuple):
    """Replace an exact string in a file."""

    file_path: str
    """Absolute path, or relative to the workspace."""
    old_string: str
    """The exact text to replace."""
    new_string: str
    """The text to put in its place."""
    replace_all: bool = False
    """Replace every occurrence instead of requiring exactly one."""


class GlobInput(NamedTuple):
    """Find files by glob pattern."""

    pattern: str
    """A glob such as `**/*.py` or `src/*.{ts,tsx}`."""
    path: str | None = None
    """Directory to search in; the workspace when absent."""


GrepOutputMode = Literal["content", "files_with_matches", "count"]
GREP_OUTPUT_MODES: tuple[GrepOutputMode, ...] = ("content", "files_with_matches", "count")


class GrepInput(NamedTuple):
    """Search file contents with a regular expression."""

    pattern: str
    """A Python regular expression."""
    path: str | None = None
    """File or directory to search; the workspace when absent."""
    glob: str | None = None
    """Only files matching this glob (matched against the name when it has no `/`)."""
    output_mode: GrepOutputMode = "files_with_matches"
    """What to show: matching lines, file names, or counts per file."""
    case_insensitive: bool = False
    """Ignore case."""
    line_numbers: bool = True
    """Show line numbers (content mode)."""
    after: int | None = None
    """Lines of context after each match (content mode)."""
    before: int | None = None
    """Lines of context before each match (content mode)."""
    context: int | None = None
    """Lines of context before and after each match (content mode)."""
    head_limit: int | None = None
    """Show only the first N lines or entries."""


class TaskInput(NamedTuple):
    """Delegate a task to a subagent (carried out by the host)."""

    description: str
    """A short (3-5 word) description of the task."""
    prompt: str
    """The task for the agent to perform."""
    subagent_type: str = "general-purpose"
    """The type of agent to use."""
    model: str | None = None
    """A model alias for this task (sonnet, opus, haiku, inherit)."""
    name: str | None = None
    """A name for the subagent."""
    mode: str | None = None
    """A permission mode; it can only make the mode in force stricter."""
    isolation: str | None = None
    """Claude Code's isolation (warden: worktree not run yet, remote refused)."""
    max_turns: int | None = None
    """Most model calls the subagent may make."""
    run_in_background: bool | None = None
    """Start the task without waiting for it."""
    session_id: str | None = None
    """Resume an earlier task's session."""


CHECKS.update(
    {
        BashInput: {
            "command": Check(str, min_length=1),
            "timeout": Check(float, gt=0, le=BASH_MAX_TIMEOUT_MS),
            "description": Check(str),
            "run_in_background": Check(bool),
        },
        ReadInput: {
            "file_path": Check(str),
            "offset": Check(int, ge=0),
            "limit": Check(int, ge=1),
        },
        WriteInput: {
            "file_path": Check(str),
            "content": Check(str),
        },
        EditInput: {
            "file_path": Check(str),
            "old_string": Check(str),
            "new_string": Check(str),
            "replace_all": Check(bool),
        },
        GlobInput: {
            "pattern": Check(str, min_length=1),
            "path": Check(str),
        },
        GrepInput: {
            "pattern": Check(str, min_length=1),
            "path": Check(str),
            "glob": Check(str),
            "output_mode": Check(str, choices=GREP_OUTPUT_MODES),
            "case_insensitive": Check(bool, key="-i"),
            "line_numbers": Check(bool, key="-n"),
            "after": Check(int, ge=0, key="-A"),
            "before": Check(int, ge=0, key="-B"),
            "context": Check(int, ge=0, key="-C"),
            "head_limit": Check(int, ge=1),
        },
        TaskInput: {
            "description": Check(str, min_length=1),
            "prompt": Check(str, min_length=1),
            "subagent_type": Check(str, min_length=1),
            "model": Check(str, choices=TASK_MODELS),
            "name": Check(str, min_length=1),
            "mode": Check(str, choices=TASK_MODES),
            "isolation": Check(str, choices=TASK_ISOLATIONS),
            "max_turns": Check(int, ge=1),
            "run_in_background": Check(bool),
            "session_id": Check(str),
        },
    }
)

INPUT_TYPES: dict[str, type] = {
    "Bash": BashInput,
    "Read": ReadInput,
    "Write": WriteInput,
    "Edit": EditInput,
    "Glob": GlobInput,
    "Grep": GrepInput,
    "Task": TaskInput,
    **more_inputs.INPUT_TYPES,
}

__all__ = ["CHECKS", "Check", "dump", "input_fields", "parse"]


def _path_prop(what: str) -> JSONObject:
    return {"type": "string", "description": f"The absolute path to the {what}"}


TOOL_SCHEMAS: dict[str, JSONObject] = {
    "Bash": _schema(
        "Executes a bash command in the workspace directory and returns its combined "
        "stdout and stderr and its exit code. Each call starts a fresh shell; processes "
        "it leaves running in the background are stopped when the command finishes, "
        "unless run_in_background is set: then the command keeps running and its shell "
        "id comes back at once.",
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
            "run_in_background": {
                "type": "boolean",
                "description": "Set to true to run this command in the background. Use "
                "TaskOutput to read the output later.",
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
            "model": {
                "type": "string",
                "enum": list(TASK_MODELS),
                "description": "Optional model for this agent; takes precedence over the "
                "agent type's model (inherit: yours)",
            },
            "name": {"type": "string", "description": "Name for the spawned agent"},
            "mode": {
                "type": "string",
                "enum": list(TASK_MODES),
                "description": "Permission mode for the agent (it can only be stricter)",
            },
            "isolation": {
                "type": "string",
                "enum": list(TASK_ISOLATIONS),
                "description": "Isolation mode (warden does not run worktree isolation "
                "yet: the agent works in the shared workspace)",
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
        ["description", "prompt"],
    ),
    **more_inputs.TOOL_SCHEMAS,
}


def tool_params(names: list[str]) -> list[JSONObject]:
    """The `tools` parameter of a Messages API call for these tool names, in order."""
    return [{"name": name, **TOOL_SCHEMAS[name]} for name in names if name in TOOL_SCHEMAS]
