"""JSON as a type: what `json.loads` returns and `json.dumps` accepts.

Used wherever data is JSON (tool inputs and results, event payloads, transcripts,
Docker Engine replies) instead of an unchecked type, so mypy makes code look
before it uses a value. A `TypeAliasType` so pydantic models can hold it too (and publish it in
their JSON Schemas as a recursive definition). `input_hash` is the one hash of a
tool call's name and input: approvals and audit records are bound to it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from typing_extensions import TypeAliasType

JSONValue = TypeAliasType(
    "JSONValue",
    "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None",
)
"""A JSON value: null, a boolean, a number, a string, an array or an object."""

JSONObject = dict[str, JSONValue]
"""A JSON object."""

JSONLike = TypeAliasType(
    "JSONLike",
    "str | int | float | bool | Sequence[JSONLike] | Mapping[str, JSONLike] | None",
)
"""What may be serialised as JSON, read-only: accepts `dict[str, str]`, tuples, …
(a `dict[str, JSONValue]` parameter would refuse them: dict is invariant)."""

__all__ = ["JSONLike", "JSONObject", "JSONValue", "input_hash", "to_json", "to_json_object"]


def to_json(value: JSONLike) -> JSONValue:
    """`value` as plain JSON data: mappings become dicts, sequences lists."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return [to_json(v) for v in value]


def to_json_object(value: Mapping[str, JSONLike]) -> JSONObject:
    """A mapping of JSON-like values as a JSON object."""
    return {str(k): to_json(v) for k, v in value.items()}


def input_hash(tool_name: str, tool_input: JSONObject) -> str:
    """sha256 of the canonical JSON of the tool name and input."""
    canonical = json.dumps(
        {"tool_name": tool_name, "tool_input": tool_input},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    # surrogatepass: JSON may carry lone surrogates ("\ud800"), which plain UTF-8 refuses.
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
