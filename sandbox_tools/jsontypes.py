"""JSON as a type, standard library only (the sandbox carries no third-party packages).

The same shape as `orchestrator.jsontypes.JSONValue` (which is a `TypeAliasType`
so pydantic can hold it); used for every JSON document the runner reads or sends,
so mypy makes code look before it uses a value. At run time the recursion is a
`ForwardRef` bound to this module, so `typing.get_type_hints` resolves the alias
from any module that uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ForwardRef, TypeAlias, Union

if TYPE_CHECKING:
    JSONValue: TypeAlias = (
        "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
    )
    """A JSON value: null, a boolean, a number, a string, an array or an object."""
else:
    _SELF = ForwardRef("JSONValue", module=__name__)
    JSONValue = Union[str, int, float, bool, list[_SELF], dict[str, _SELF], None]  # noqa: UP007

JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object."""

__all__ = ["JSONObject", "JSONValue"]
