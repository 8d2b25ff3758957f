"""warden as a library: open a run, start, await and stop sandboxed subagents,
subscribe to the run's events and answer its questions with a callback.

    from orchestrator.api import RunConfig, open_session

    async with open_session(RunConfig(workspace=path, mode="acceptEdits")) as run:
        result = await run.task(description="tests", prompt="Run the tests", subagent_type="bash")

The CLI (`warden run`) and the MCP server (`warden mcp`) open their runs through the
same mapping (`open_run_from`), so a run opened here has the same policy, containers,
broker, budgets, egress, audit and events.

May import: `config`, `errors`, `exit_codes`, `agents`, `backend.contract`, `egress`, `permissions`,
`results`, `runtime`, `workspace`.
"""

from orchestrator.api.session import (
    AgentType,
    RunConfig,
    WardenRun,
    open_run_from,
    open_session,
)
from orchestrator.errors import TaskRefusedError
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    Approver,
    CallbackApprover,
)
from orchestrator.results.models import Event
from orchestrator.runtime.tasks import TaskInput, TaskResult, TaskStatus

__all__ = [
    "AgentType",
    "ApprovalAnswer",
    "ApprovalQuestion",
    "Approver",
    "CallbackApprover",
    "Event",
    "RunConfig",
    "TaskInput",
    "TaskRefusedError",
    "TaskResult",
    "TaskStatus",
    "WardenRun",
    "open_run_from",
    "open_session",
]
