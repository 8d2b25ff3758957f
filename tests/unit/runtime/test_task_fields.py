"""The Task tool's input is Claude Code's Agent input: a per-call model alias, name,
mode (only ever stricter), isolation and run_in_background; unknown fields are
ignored (as the pinned Claude Code ignores them) and named in a warning."""

from __future__ import annotations

import pytest

from orchestrator.agents.definition import AgentDefinition
from orchestrator.errors import TaskRefusedError
from orchestrator.runtime.tasks import (
    TASK_MODELS,
    TaskInput,
    call_overrides,
    unknown_fields,
)
from sandbox_tools.tools import inputs as sandbox_inputs

AGENT = AgentDefinition(name="a", description="d", system_prompt="p")


def _input(**extra: object) -> TaskInput:
    return TaskInput.model_validate({"description": "d", "prompt": "p", **extra})


def test_claude_codes_fields_are_read_and_unknown_ones_ignored() -> None:
    raw = {"description": "d", "prompt": "p", "model": "haiku", "name": "scout",
           "mode": "plan", "isolation": "worktree", "team_name": "x", "bogus": 1}  # fmt: skip
    task = TaskInput.model_validate(raw)
    assert (task.model, task.name, task.mode, task.isolation) == (
        "haiku", "scout", "plan", "worktree",
    )  # fmt: skip
    assert task.subagent_type == "general-purpose"  # optional, as in Claude Code
    assert task.run_in_background is None  # absent: the agent type decides
    assert unknown_fields(raw) == ["team_name", "bogus"]


def test_a_model_outside_the_aliases_is_refused() -> None:
    with pytest.raises(ValueError, match="model"):
        _input(model="gpt-4")


def test_mode_only_narrows() -> None:
    narrowed, warnings = call_overrides(AGENT, _input(mode="plan"))
    assert (narrowed.permission_mode, warnings) == ("plan", [])
    strict = AGENT.model_copy(update={"permission_mode": "plan"})
    kept, _ = call_overrides(strict, _input(mode="bypassPermissions"))
    assert kept.permission_mode == "plan"
    auto, warnings = call_overrides(AGENT, _input(mode="auto"))
    assert auto.permission_mode is None and "does not exist in warden" in warnings[0]


def test_isolation_worktree_is_run_and_remote_is_refused() -> None:
    _, warnings = call_overrides(AGENT, _input(isolation="worktree"))
    assert warnings == []
    with pytest.raises(TaskRefusedError, match="remote"):
        call_overrides(AGENT, _input(isolation="remote"))


def test_the_sandbox_task_tool_offers_the_same_choices() -> None:
    assert sandbox_inputs.TASK_MODELS == TASK_MODELS
    schema = sandbox_inputs.TOOL_SCHEMAS["Task"]["input_schema"]
    assert isinstance(schema, dict)
    props = schema["properties"]
    assert isinstance(props, dict)
    assert {"model", "name", "mode", "isolation"} <= set(props)
