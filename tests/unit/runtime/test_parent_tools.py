"""Locks in that the parent's tool schemas are generated from the pydantic models that
validate the same inputs: every field the model accepts is described to the model,
required means required, and the schema carries no pydantic artefacts (titles,
nulls, defaults) that the Messages API would show the model."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from pydantic import BaseModel, ValidationError

from orchestrator.runtime.parent_tools import TaskOutputInput, TaskStopInput, tool_schemas
from orchestrator.runtime.tasks import TaskInput

MODELS: dict[str, type[BaseModel]] = {
    "Task": TaskInput,
    "TaskOutput": TaskOutputInput,
    "TaskStop": TaskStopInput,
}


def _schemas(fork: bool = True) -> dict[str, dict[str, Any]]:
    tools = tool_schemas(["- bash: runs"], fork=fork)
    return {str(tool["name"]): cast(dict[str, Any], tool["input_schema"]) for tool in tools}


def test_fork_is_offered_only_in_a_fork_mode_run() -> None:
    assert "fork" in _schemas()["Task"]["properties"]
    assert "fork" not in _schemas(fork=False)["Task"]["properties"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_schema_and_model_agree(name: str) -> None:
    schema = _schemas()[name]
    model = MODELS[name]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(model.model_fields)
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    assert set(schema.get("required", [])) == required
    for field_name, prop in schema["properties"].items():
        assert prop.get("description"), f"{name}.{field_name} has no description"
        assert "type" in prop, f"{name}.{field_name} has no plain type"


def test_no_pydantic_artefacts_reach_the_model() -> None:
    text = json.dumps(_schemas())
    for artefact in ('"title":', '"null"', '"anyOf"', '"default":'):
        assert artefact not in text


def test_limits_in_the_schema_are_the_models_limits() -> None:
    task = _schemas()["Task"]["properties"]
    assert task["description"]["maxLength"] == 200
    assert task["max_turns"]["minimum"] == 1
    with pytest.raises(ValidationError):
        TaskInput.model_validate({"description": "x" * 201, "prompt": "p", "subagent_type": "b"})
    with pytest.raises(ValidationError):
        TaskOutputInput.model_validate({"task_id": "sa_1", "timeout": -1})
    with pytest.raises(ValidationError):
        TaskStopInput.model_validate({"task_id": "sa_1", "force": True})


def test_a_large_agent_library_keeps_the_task_description_within_its_budget() -> None:
    """200 agent files with long descriptions: the parent's Task tool (sent every turn)
    stays bounded, and every type is still named so the model can call it."""
    from orchestrator.runtime.parent_tools import MAX_AGENT_LISTING_CHARS, agent_listing

    agents = [(f"agent-{i:03d}", f"Does task {i}. " + "Lots of detail. " * 20 + "\nMore.")
              for i in range(200)]  # fmt: skip
    lines = agent_listing(agents)
    text = "\n".join(lines)
    assert len(text) <= MAX_AGENT_LISTING_CHARS
    assert lines[0].startswith("- agent-000: Does task 0.") and "More." not in text
    assert "more types (use them by name)" in lines[-1]
    named = sum(f"agent-{i:03d}" in text for i in range(200))
    counted = int(lines[-1].split("and ")[-1].split(" more")[0]) if "and " in lines[-1] else 0
    assert named + counted == 200
    small = agent_listing([("bash", "Shell specialist.\nSecond line.")])
    assert small == ["- bash: Shell specialist."]
