"""The MCP face of the parent's tools: `Task`, `TaskOutput` and `TaskStop` with the
parent tool's input schemas (`listing`) and result texts, and the workspace's agent types as a listing. A call warden refuses (invalid
input, an unknown subagent_type, a `Task(type)` deny rule, a cap, an unknown id) is
a tool result with `isError`, in words the calling model can act on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import mcp.types as types
from pydantic import ValidationError

from orchestrator.errors import TaskNotFoundError, TaskRefusedError
from orchestrator.mcp_server.listing import tool_dicts
from orchestrator.runtime.parent_tools import MAX_OUTPUT_TIMEOUT_MS, TaskOutputInput, TaskStopInput

if TYPE_CHECKING:
    from orchestrator.api import AgentType, WardenRun

AGENTS_URI = "warden://agents"
"""The resource that lists the workspace's agent types (also in Task's description)."""


def tool_list(agents: list[AgentType]) -> list[types.Tool]:
    return [
        types.Tool.model_validate(tool)
        for tool in tool_dicts([(a.name, a.description) for a in agents])
    ]


def agents_text(agents: list[AgentType]) -> str:
    """The agent-type listing resource: one `name: description (source)` a line."""
    return "\n".join(f"{a.name}: {a.description.strip()} ({a.source})" for a in agents) + "\n"


def result(text: str, *, error: bool = False) -> types.CallToolResult:
    """A tool result of text only: the parent tool's wording. (Structured content is
    left out on purpose: Claude Code shows a model the structured form instead of the
    text when both are there.)"""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


async def call_tool(
    run: WardenRun,
    name: str,
    arguments: Mapping[str, Any],
    *,
    call_id: str,
    on_start: Callable[[str], None] | None = None,
) -> types.CallToolResult:
    """Answer one call of `name` on `run`. Never raises for what a client sent: a
    refusal is an error result."""
    try:
        if name == "Task":
            return await _task(run, arguments, call_id, on_start)
        if name == "TaskOutput":
            return await _task_output(run, TaskOutputInput.model_validate(dict(arguments)))
        if name == "TaskStop":
            stop = TaskStopInput.model_validate(dict(arguments))
            stopped = await run.stop(stop.task_id)
            text = f"Stopped {', '.join(stopped)}." if stopped else "That task had already ended."
            return result(text)
    except TaskRefusedError as exc:
        return result(str(exc), error=True)
    except TaskNotFoundError as exc:
        return result(f"{name} failed. Error: {exc}", error=True)
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors()[:5]
        )
        return result(f"Invalid {name} input: {fields}", error=True)
    return result(f"Unknown tool {name!r}; the tools are Task, TaskOutput, TaskStop.", error=True)


async def _task(
    run: WardenRun,
    arguments: Mapping[str, Any],
    call_id: str,
    on_start: Callable[[str], None] | None,
) -> types.CallToolResult:
    if arguments.get("run_in_background") is True:
        task_id = await run.start(arguments, call_id=call_id)
        if on_start is not None:
            on_start(task_id)
        return result(
            f"Task started in the background with id {task_id}. Collect its result with "
            "TaskOutput and stop it with TaskStop; both take this id."
        )
    done = await run.task(arguments, call_id=call_id, on_start=on_start)
    return result(done.render(), error=done.is_error)


async def _task_output(run: WardenRun, request: TaskOutputInput) -> types.CallToolResult:
    task_id = request.task_id
    timeout_s = min(request.timeout, MAX_OUTPUT_TIMEOUT_MS) / 1000
    done = await run.output(task_id, timeout_s=timeout_s if request.block else 0)
    if done is None:
        return result(f"Task {task_id} is {run.status(task_id).value}; no result yet.")
    return result(f"Task {task_id} status: {done.status.value}. {done.render()}")
