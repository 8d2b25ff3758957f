"""How a tool input is checked without pydantic: `Check` per field, `parse`, `dump`.

Each tool's input is a named tuple; `CHECKS` says how each of its fields is
checked: the JSON key (Claude Code's, e.g. `-i`), the type and its bounds; a
field without a default is required. `parse` validates what the model sent as
strictly as a closed pydantic model would: unknown fields, missing required ones
and wrong types are refused (a boolean is not a number, a number is not a string;
a whole float such as `2.0` is taken as an int), and every problem is listed.
Written by hand because the sandbox carries only the standard library. A field of
kind `list` is checked to be a JSON array; its items are the tool's to check.
The declarations live in `inputs` (and `more_inputs`), which fill `CHECKS`.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject


class Check(NamedTuple):
    """How one input field is checked."""

    kind: type
    """str, int, float or bool."""
    key: str | None = None
    """The JSON key when it differs from the attribute name (`-i`)."""
    min_length: int | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None


CHECKS: dict[type, dict[str, Check]] = {}
"""How each field of each input type is checked (its JSON key, type and bounds);
filled by the modules that declare input types."""

InputT = TypeVar("InputT")


class InputField(NamedTuple):
    """One field of a tool input: its attribute, JSON key, check and default."""

    name: str
    key: str
    check: Check
    required: bool
    default: object


def input_fields(input_type: type) -> list[InputField]:
    """The fields of a tool input type, in declaration order."""
    checks = CHECKS[input_type]
    defaults: dict[str, object] = input_type._field_defaults  # type: ignore[attr-defined]
    names: tuple[str, ...] = input_type._fields  # type: ignore[attr-defined]
    return [
        InputField(
            name, checks[name].key or name, checks[name], name not in defaults, defaults.get(name)
        )
        for name in names
    ]


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "an array",
}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _coerce(check: Check, value: object) -> tuple[object, str | None]:
    """(the value as the field's type, None) or (None, what is wrong)."""
    wrong = f"must be {_TYPE_NAMES[check.kind]}, got {_json_type(value)}"
    if isinstance(value, bool) and check.kind is not bool:
        return None, wrong
    if check.kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            return None, wrong
    elif check.kind is float:
        if not isinstance(value, (int, float)):
            return None, wrong
        value = float(value)
    elif not isinstance(value, check.kind):
        return None, wrong
    return value, _bounds(check, value)


def _bounds(check: Check, value: object) -> str | None:
    if isinstance(value, str):
        if check.min_length is not None and len(value) < check.min_length:
            return f"must have at least {check.min_length} character(s)"
        if check.choices is not None and value not in check.choices:
            return "must be one of " + ", ".join(repr(c) for c in check.choices)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if check.ge is not None and value < check.ge:
            return f"must be at least {check.ge:g}"
        if check.gt is not None and value <= check.gt:
            return f"must be greater than {check.gt:g}"
        if check.le is not None and value > check.le:
            return f"must be at most {check.le:g}"
    return None


def parse(name: str, input_type: type[InputT], raw: object) -> InputT:
    """`raw` checked against `input_type`'s fields; a ToolError listing every problem."""
    if not isinstance(raw, dict):
        raise ToolError(f"invalid input for {name}: must be an object, got {_json_type(raw)}")
    fields = input_fields(input_type)
    known = {f.key for f in fields}
    problems = [
        f"{key}: unknown field (not one of {', '.join(sorted(known))})"
        for key in raw
        if key not in known
    ]
    values: dict[str, object] = {}
    for f in fields:
        if f.key not in raw:
            if f.required:
                problems.append(f"{f.key}: required field is missing")
            continue
        value = raw[f.key]
        if value is None and not f.required and f.default is None:
            values[f.name] = None
            continue
        coerced, problem = _coerce(f.check, value)
        if problem is not None:
            problems.append(f"{f.key}: {problem}")
        else:
            values[f.name] = coerced
    if problems:
        raise ToolError(f"invalid input for {name}: {'; '.join(problems)}")
    return input_type(**values)


def dump(inp: object) -> JSONObject:
    """A parsed input back as JSON keys, without the fields that are None."""
    return {
        f.key: getattr(inp, f.name)
        for f in input_fields(type(inp))
        if getattr(inp, f.name) is not None
    }
