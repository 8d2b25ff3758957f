"""Claude Code (2.1.x) puts `role: "system"` entries among the messages; the scripted
model answers such requests (a differential test drives the real CLI against it),
while a conversation that is invalid around them is still refused."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.scripted.script import RequestView
from orchestrator.scripted.validate import InvalidRequest, check_messages

SYSTEM = {"role": "system", "content": "Available agent types for the Agent tool: ..."}
USE = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"}


def test_system_entries_stand_outside_the_alternation() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        SYSTEM,
        {"role": "assistant", "content": [USE]},
        SYSTEM,
        {"role": "user", "content": [RESULT]},
    ]
    check_messages(messages)
    view = RequestView({"model": "m", "max_tokens": 1, "messages": messages})
    assert view.turn == 1
    assert view.tool_results() == ["a"]


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([SYSTEM, {"role": "user", "content": "hi"}], "first message"),
        ([{"role": "user", "content": "hi"}, {"role": "system", "content": [USE]}], "text only"),
        ([{"role": "user", "content": "hi"}, {"role": "system", "content": ""}], "non-empty"),
        ([{"role": "user", "content": "a"}, SYSTEM, {"role": "user", "content": "b"}], "alternate"),
        ([{"role": "developer", "content": "a"}], "'user', 'assistant' or 'system'"),
    ],
)
def test_invalid_around_system_entries_is_refused(messages: list[Any], reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        check_messages(messages)
