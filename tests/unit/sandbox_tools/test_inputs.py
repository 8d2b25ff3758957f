"""Tool inputs are checked strictly without pydantic, and agree with the schemas the
model sees: same tools (Claude Code's names, matching the wire contract), same
fields, same required fields, closed JSON object schemas; unknown fields,
missing fields, wrong types (a boolean is not a number, a number is not a
string) and out-of-range values are refused with every problem listed."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox_tools import wire
from sandbox_tools.errors import ToolError
from sandbox_tools.tools import LOCAL_TOOL_NAMES, LOOP_TOOL_NAMES, parse_input
from sandbox_tools.tools.inputs import (
    INPUT_TYPES,
    TOOL_SCHEMAS,
    BashInput,
    GrepInput,
    TaskInput,
    dump,
    input_fields,
    tool_params,
)


def test_tools_match_the_wire_contract() -> None:
    assert set(LOCAL_TOOL_NAMES) | set(LOOP_TOOL_NAMES) == set(wire.TOOL_NAMES)
    assert set(TOOL_SCHEMAS) == set(wire.TOOL_NAMES) | set(wire.DELEGATION_TOOL_NAMES)
    assert set(INPUT_TYPES) == set(TOOL_SCHEMAS)


SCHEMA_TYPES = {
    str: {"string"},
    int: {"number", "integer"},
    float: {"number"},
    bool: {"boolean"},
    list: {"array"},
}


@pytest.mark.parametrize("name", sorted(TOOL_SCHEMAS))
def test_schema_and_input_type_list_the_same_fields(name: str) -> None:
    schema = TOOL_SCHEMAS[name]["input_schema"]
    fields = {f.key: f for f in input_fields(INPUT_TYPES[name])}
    assert set(schema["properties"]) == set(fields)
    assert set(schema["required"]) == {k for k, f in fields.items() if f.required}
    for key, f in fields.items():
        assert schema["properties"][key]["type"] in SCHEMA_TYPES[f.check.kind], key
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert TOOL_SCHEMAS[name]["description"]


def test_tool_params_keep_the_specs_order_and_skip_unknown_names() -> None:
    params = tool_params(["Grep", "Bash", "AskUserQuestion"])
    assert [p["name"] for p in params] == ["Grep", "Bash"]
    assert set(params[0]) == {"name", "description", "input_schema"}


def test_grep_flags_use_claude_codes_names() -> None:
    grep = parse_input("Grep", {"pattern": "x", "-i": True, "-C": 2})
    assert isinstance(grep, GrepInput)
    assert grep.case_insensitive is True and grep.context == 2
    assert grep.output_mode == "files_with_matches" and grep.line_numbers is True
    assert dump(grep)["-i"] is True


def test_valid_inputs_parse_with_defaults_and_whole_floats_as_ints() -> None:
    bash = parse_input("Bash", {"command": "ls", "timeout": 1500})
    assert bash == BashInput(command="ls", timeout=1500.0, description=None)
    read = parse_input("Read", {"file_path": "a", "offset": 3.0, "limit": None})
    assert (read.offset, read.limit) == (3, None)  # type: ignore[attr-defined]
    task = {"description": "d", "prompt": "p", "subagent_type": "bash", "max_turns": 2}
    assert dump(parse_input("Task", task)) == task
    assert isinstance(parse_input("Task", task), TaskInput)


@pytest.mark.parametrize(
    ("name", "raw", "problems"),
    [
        ("Bash", {"command": "ls", "cwd": "/"}, ["cwd: unknown field"]),
        ("Bash", {}, ["command: required field is missing"]),
        ("Bash", {"command": ""}, ["command: must have at least 1 character"]),
        ("Bash", {"command": 7}, ["command: must be a string, got a number"]),
        ("Bash", {"command": ["ls"]}, ["command: must be a string, got an array"]),
        ("Bash", {"command": None}, ["command: must be a string, got null"]),
        ("Bash", {"command": "ls", "timeout": True}, ["timeout: must be a number, got a boolean"]),
        ("Bash", {"command": "ls", "timeout": "9"}, ["timeout: must be a number, got a string"]),
        ("Bash", {"command": "ls", "timeout": 0}, ["timeout: must be greater than 0"]),
        ("Bash", {"command": "ls", "timeout": 600_001}, ["timeout: must be at most 600000"]),
        ("Read", {"file_path": "a", "offset": 1.5}, ["offset: must be an integer, got a number"]),
        ("Read", {"file_path": "a", "limit": 0}, ["limit: must be at least 1"]),
        ("Read", {"file_path": "a", "offset": -1}, ["offset: must be at least 0"]),
        ("Edit", {"file_path": "a", "old_string": "x"}, ["new_string: required field is missing"]),
        (
            "Edit",
            {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": 1},
            ["replace_all: must be a boolean, got a number"],
        ),
        (
            "Edit",
            {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": None},
            ["replace_all: must be a boolean, got null"],
        ),
        ("Grep", {"pattern": "x", "output_mode": "lines"}, ["output_mode: must be one of"]),
        ("Grep", {"pattern": "x", "-i": "yes"}, ["-i: must be a boolean, got a string"]),
        ("Glob", {"pattern": "*", "path": {}}, ["path: must be a string, got an object"]),
        (
            "Write",
            {"file_path": 1, "content": 2, "mode": "x"},
            [
                "mode: unknown field",
                "file_path: must be a string",
                "content: must be a string",
            ],
        ),
        ("Task", {"description": "d", "prompt": "p", "model": "gpt"}, ["model: must be one of"]),
    ],
)
def test_bad_inputs_are_refused_listing_every_problem(
    name: str, raw: dict[str, Any], problems: list[str]
) -> None:
    with pytest.raises(ToolError) as caught:
        parse_input(name, raw)
    message = str(caught.value)
    assert message.startswith(f"invalid input for {name}: ")
    for problem in problems:
        assert problem in message
    assert message.count(";") == len(problems) - 1


def test_an_input_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ToolError, match="must be an object, got an array"):
        parse_input("Read", ["a"])  # type: ignore[arg-type]
