"""Typed reads of decoded JSON in tests: a test that looks inside a document says
which shape it expects there, and another shape fails the test naming what it found
(instead of a `TypeError` deep in an assertion, or an `Any` that checks nothing)."""

from __future__ import annotations

from orchestrator.jsontypes import JSONObject, JSONValue


def obj(value: JSONValue) -> JSONObject:
    """`value`, which must be a JSON object."""
    assert isinstance(value, dict), f"expected a JSON object, found {value!r:.200}"
    return value


def arr(value: JSONValue) -> list[JSONValue]:
    """`value`, which must be a JSON array."""
    assert isinstance(value, list), f"expected a JSON array, found {value!r:.200}"
    return value


def string(value: JSONValue) -> str:
    """`value`, which must be a JSON string."""
    assert isinstance(value, str), f"expected a JSON string, found {value!r:.200}"
    return value
