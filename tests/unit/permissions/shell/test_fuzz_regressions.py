"""Every bypass the differential fuzzer ever found stays fixed: the analyser must not
allow any saved case (tests/fuzz/regressions.jsonl) under the fuzz allow list.

Cases the analyser on `main` still allowed when they were last refreshed carry
`"open": true` and are expected failures until the analyser is fixed
(`python -m tests.fuzz --refresh` updates the flags)."""

from __future__ import annotations

import json

import pytest

from tests.fuzz.judge import decide
from tests.fuzz.session import REGRESSIONS


def _saved() -> list[dict[str, object]]:
    return [json.loads(line) for line in REGRESSIONS.read_text().splitlines() if line.strip()]


def _params() -> list[object]:
    params: list[object] = []
    for record in _saved():
        marks = (
            [pytest.mark.xfail(reason="an open analyser bypass (issue 8)", strict=False)]
            if record.get("open")
            else []
        )
        params.append(pytest.param(record["command"], marks=marks, id=repr(record["command"])[:60]))
    return params


def test_the_regressions_file_is_well_formed() -> None:
    records = _saved()
    commands = [r["command"] for r in records]
    assert len(commands) == len(set(commands)), "a case is saved twice"
    for record in records:
        assert isinstance(record["command"], str) and record["command"]
        assert record["saw"], f"{record['command']!r} says nothing about what the oracle saw"


@pytest.mark.parametrize("command", _params())
def test_a_saved_bypass_is_not_allowed(command: str) -> None:
    behavior, reason = decide(command)
    assert behavior != "allow", f"the analyser allows {command!r} again: {reason}"
