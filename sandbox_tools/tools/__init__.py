"""The tools that run inside the container, and the one function that runs them.

`run_tool` validates the input against the tool's input type (`inputs.parse`),
runs the tool
and turns every failure into a `ToolOutput` with `is_error=True`: a
`ToolError` keeps its message; any other exception is a bug, logged with its
traceback to stderr and reported to the model as an internal tool error.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.tools.base import BASH_DETAIL_CHARS, ToolContext, ToolOutput, one_line
from sandbox_tools.tools.inputs import INPUT_TYPES, TOOL_SCHEMAS, parse, tool_params

log = logging.getLogger("sandbox_tools")

DETAIL_CHARS = 160
"""Longest progress detail (a command or a path) put in an event."""

_LOCAL_TOOLS: dict[str, tuple[str, str]] = {
    "Bash": ("bash", "bash"),
    "Read": ("files", "read"),
    "Write": ("files", "write"),
    "Edit": ("files", "edit"),
    "Glob": ("search", "glob"),
    "Grep": ("search", "grep"),
    "TaskOutput": ("shells", "task_output"),
    "TaskStop": ("shells", "task_stop"),
    "NotebookEdit": ("notebook", "notebook_edit"),
    "TodoWrite": ("todos", "todo_write"),
}
"""Tool name -> (module under sandbox_tools.tools, function). Imported on first use:
the first model request goes out before the tools' imports (subprocess, re) are paid."""


# Any: each tool takes its own input NamedTuple (checked by `parse`), so one
# registry signature cannot name it.
def _implementation(name: str) -> Callable[[Any, ToolContext], ToolOutput] | None:
    where = _LOCAL_TOOLS.get(name)
    if where is None:
        return None
    module = importlib.import_module(f"sandbox_tools.tools.{where[0]}")
    run: Callable[[Any, ToolContext], ToolOutput] = getattr(module, where[1])  # Any: as above
    return run


def parse_input(name: str, raw: JSONObject) -> object:
    """Validate a tool input; a ToolError that lists what is wrong otherwise."""
    input_type = INPUT_TYPES.get(name)
    if input_type is None:
        raise ToolError(f"unknown tool {name!r}")
    return parse(name, input_type, raw)


def run_tool(name: str, raw: JSONObject, ctx: ToolContext) -> ToolOutput:
    """Run a local tool; never raises for a tool failure."""
    try:
        run = _implementation(name)
        if run is None:
            raise ToolError(f"{name!r} is not a tool this runner carries out")
        return run(parse_input(name, raw), ctx)
    except ToolError as e:
        return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:DETAIL_CHARS])
    except Exception as e:
        log.exception("internal error in tool %s", name)
        return ToolOutput(
            f"Error: internal error in the {name} tool ({type(e).__name__}: {e}). "
            "This is a bug in the runner, not in your input; try another way.",
            is_error=True,
            summary=f"internal error: {type(e).__name__}",
        )


def describe(name: str, raw: JSONObject) -> str:
    """A short progress detail: the command, the file path or the pattern."""
    command = raw.get("command")
    if name == "Bash" and isinstance(command, str):
        return one_line(command, BASH_DETAIL_CHARS)
    for key in (
        "file_path", "notebook_path", "url", "query", "pattern", "description", "path", "task_id",
        "uri", "server",
    ):  # fmt: skip
        value = raw.get(key)
        if isinstance(value, str):
            return value if len(value) <= DETAIL_CHARS else value[: DETAIL_CHARS - 1] + "…"
    return ""


LOCAL_TOOL_NAMES = tuple(_LOCAL_TOOLS)
LOOP_TOOL_NAMES = ("WebFetch", "WebSearch", "Skill")
"""Tools the agent loop carries out itself, because they need a model call
(`runner.AgentLoop.web_fetch`, `.web_search`) or the spec (`.skill`)."""

__all__ = [
    "LOCAL_TOOL_NAMES",
    "LOOP_TOOL_NAMES",
    "TOOL_SCHEMAS",
    "ToolContext",
    "ToolOutput",
    "describe",
    "kill_running_tools",
    "parse_input",
    "run_tool",
    "tool_params",
]


def kill_running_tools() -> None:
    """SIGKILL every Bash call in progress, every background shell and every MCP
    server (the host is gone); nothing to do for a module never imported (no such call was made)."""
    import sys

    for module in (
        "sandbox_tools.tools.bash", "sandbox_tools.tools.shells", "sandbox_tools.mcp_client",
    ):  # fmt: skip
        loaded = sys.modules.get(module)
        if loaded is not None:
            loaded.kill_running()
