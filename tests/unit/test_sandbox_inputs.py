"""Tool schemas shown to the model and the models that validate the input agree:
same tools (Claude Code's names, matching the wire contract), same fields, same
required fields, and every schema is a closed JSON object schema."""

from __future__ import annotations

import pytest

from sandbox_tools import wire
from sandbox_tools.tools import LOCAL_TOOL_NAMES
from sandbox_tools.tools.inputs import INPUT_MODELS, TOOL_SCHEMAS, tool_params


def test_tools_match_the_wire_contract() -> None:
    assert set(LOCAL_TOOL_NAMES) == set(wire.TOOL_NAMES)
    assert set(TOOL_SCHEMAS) == set(wire.TOOL_NAMES) | set(wire.DELEGATION_TOOL_NAMES)
    assert set(INPUT_MODELS) == set(TOOL_SCHEMAS)


@pytest.mark.parametrize("name", sorted(TOOL_SCHEMAS))
def test_schema_and_model_list_the_same_fields(name: str) -> None:
    schema = TOOL_SCHEMAS[name]["input_schema"]
    model = INPUT_MODELS[name]
    fields = {f.alias or n: f for n, f in model.model_fields.items()}
    assert set(schema["properties"]) == set(fields)
    assert set(schema["required"]) == {k for k, f in fields.items() if f.is_required()}
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert TOOL_SCHEMAS[name]["description"]


def test_tool_params_keep_the_specs_order_and_skip_unknown_names() -> None:
    params = tool_params(["Grep", "Bash", "WebFetch"])
    assert [p["name"] for p in params] == ["Grep", "Bash"]
    assert set(params[0]) == {"name", "description", "input_schema"}


def test_grep_flags_use_claude_codes_names() -> None:
    model = INPUT_MODELS["Grep"].model_validate({"pattern": "x", "-i": True, "-C": 2})
    assert model.model_dump(by_alias=True)["-i"] is True
