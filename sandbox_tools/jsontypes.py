"""JSON as a type, standard library only (the sandbox carries no third-party packages).

The same shape as `orchestrator.jsontypes.JSONValue` (which is a `TypeAliasType`
so pydantic can hold it); used for every JSON document the runner reads or sends,
so mypy makes code look before it uses a value.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
"""A JSON value: null, a boolean, a number, a string, an array or an object."""

JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object."""

__all__ = ["JSONObject", "JSONValue"]
