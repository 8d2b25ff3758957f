"""The tools `warden mcp` lists (`Task`, `TaskOutput`, `TaskStop`) in the MCP wire
form: names, descriptions with the workspace's agent types, and the input schemas of
the parent tool's pydantic models. It needs pydantic and those models only, so the
stdio front (`front`) can list them before the SDK and the run are loaded; the SDK
server lists the same (`tools.tool_list`)."""

from __future__ import annotations

from typing import Any

from orchestrator.runtime.parent_tools import (
    TASK_ID_WARNING,
    TaskOutputInput,
    TaskStopInput,
    agent_listing,
    input_schema,
)
from orchestrator.runtime.tasks import TaskInput

TASK_DESCRIPTION = (
    "Launch a subagent in its own locked-down warden container to carry out a task: it "
    "shares the workspace, has no network unless policy allows, and every tool call it "
    "makes is decided by warden's policy on the host. It sees only your prompt (not this "
    "conversation) and returns only its final answer. With run_in_background it returns "
    "a task id at once; collect the result with TaskOutput. Pass session_id (a task id "
    "from an earlier Task result) to continue that subagent's conversation."
)


def task_schema() -> dict[str, Any]:
    """The Task input schema of the parent's tool, without fork mode (a fork needs
    warden's own parent conversation)."""
    schema: dict[str, Any] = dict(input_schema(TaskInput))
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["properties"] = {k: v for k, v in properties.items() if k != "fork"}
    return schema


def tool_dicts(agents: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The three tools for (name, description) agent types, as `tools/list` sends them."""
    lines = agent_listing(agents)
    return [
        {
            "name": "Task",
            "description": TASK_DESCRIPTION + "\n\nAvailable agent types:\n" + "\n".join(lines),
            "inputSchema": task_schema(),
        },
        {
            "name": "TaskOutput",
            "description": "Get the status and result of a background task, optionally "
            "waiting for it. " + TASK_ID_WARNING,
            "inputSchema": dict(input_schema(TaskOutputInput)),
        },
        {
            "name": "TaskStop",
            "description": "Stop a running task (and every subagent it started): its "
            "container is killed; its partial transcript is kept. " + TASK_ID_WARNING,
            "inputSchema": dict(input_schema(TaskStopInput)),
        },
    ]
