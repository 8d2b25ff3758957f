"""JSON as a type: what `json.loads` returns and `json.dumps` accepts.

Used wherever data is JSON (tool inputs and results, event payloads, transcripts,
Docker Engine replies) instead of `Any`, so mypy makes code look before it uses a
value. A `TypeAliasType` so pydantic models can hold it too (and publish it in
their JSON Schemas as a recursive definition).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from typing_extensions import TypeAliasType

JSONValue = TypeAliasType(
    "JSONValue",
    "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None",
)
"""Any JSON value."""

JSONObject = dict[str, JSONValue]
"""A JSON object."""

JSONLike = TypeAliasType(
    "JSONLike",
    "str | int | float | bool | Sequence[JSONLike] | Mapping[str, JSONLike] | None",
)
"""What may be serialised as JSON, read-only: accepts `dict[str, str]`, tuples, …
(a `dict[str, JSONValue]` parameter would refuse them: dict is invariant)."""

__all__ = ["JSONLike", "JSONObject", "JSONValue"]
