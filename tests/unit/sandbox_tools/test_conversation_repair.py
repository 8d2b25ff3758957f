"""A session resumed after a crash is a valid Messages API conversation: every
unanswered tool call is closed with an is_error result saying it was interrupted
and may have run, consecutive same-role messages are merged, empty content is
dropped, and the new instruction follows without breaking alternation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.scripted.validate import InvalidRequest, check_messages
from sandbox_tools.conversation import (
    INTERRUPTED_RESULT,
    ORPHAN_RESULT_PREFIX,
    append_user_text,
    repair,
)


def use(use_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": "Bash", "input": {"command": "ls"}}


def result(use_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": text, "is_error": False}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


FULL = [
    {"role": "user", "content": "do the work"},
    {"role": "assistant", "content": [text("first"), use("toolu_1"), use("toolu_2")]},
    {"role": "user", "content": [result("toolu_1"), result("toolu_2")]},
    {"role": "assistant", "content": [use("toolu_3")]},
    {"role": "user", "content": [result("toolu_3")]},
    {"role": "assistant", "content": [text("done")]},
]


def resumed(history: list[Any], prompt: str = "continue") -> list[dict[str, Any]]:
    messages = append_user_text(repair(history), prompt)
    check_messages(messages)
    return messages


@pytest.mark.parametrize("cut", range(1, len(FULL) + 1))
def test_every_checkpoint_a_crash_can_leave_resumes_validly(cut: int) -> None:
    messages = resumed(FULL[:cut])
    assert messages[-1]["role"] == "user"
    assert "continue" in str(messages[-1]["content"])


def test_an_unanswered_tool_call_is_closed_as_interrupted_before_the_new_text() -> None:
    history = copy.deepcopy(FULL[:4])  # ends with the assistant's tool_use toolu_3
    with pytest.raises(InvalidRequest, match="toolu_3"):
        check_messages([*history, {"role": "user", "content": "continue"}])
    messages = resumed(history)
    assert history == FULL[:4], "the input is not modified"
    closing = messages[-1]["content"]
    assert closing[0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_3",
        "content": INTERRUPTED_RESULT,
        "is_error": True,
    }
    assert closing[1] == text("continue")
    assert "may have run" in INTERRUPTED_RESULT and "unknown" in INTERRUPTED_RESULT


def test_a_partly_answered_round_keeps_the_results_it_has() -> None:
    history = [*FULL[:2], {"role": "user", "content": [result("toolu_2", "two")]}]
    closing = resumed(history)[2]["content"]
    assert [b.get("tool_use_id") for b in closing[:2]] == ["toolu_1", "toolu_2"]
    assert closing[0]["content"] == INTERRUPTED_RESULT and closing[0]["is_error"] is True
    assert closing[1]["content"] == "two"


def test_same_role_runs_are_merged_and_empty_content_dropped() -> None:
    history = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": [text("b")]},
        {"role": "assistant", "content": []},
        {"role": "assistant", "content": [text(""), text("c")]},
        {"role": "assistant", "content": [use("toolu_9")]},
        {"role": "user", "content": ""},
    ]
    messages = resumed(history)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == [text("a"), text("b")]
    assert messages[1]["content"] == [text("c"), use("toolu_9")]
    assert messages[2]["content"][0]["tool_use_id"] == "toolu_9"


def test_results_without_their_call_become_text_and_results_come_first() -> None:
    history = [
        {"role": "user", "content": [result("toolu_gone", "old output")]},
        {"role": "assistant", "content": [use("toolu_1")]},
        {"role": "user", "content": [text("note"), result("toolu_1"), result("toolu_x", "x")]},
    ]
    messages = resumed(history)
    assert messages[0]["content"] == [text(ORPHAN_RESULT_PREFIX + "old output")]
    answer = messages[2]["content"]
    assert answer[0]["tool_use_id"] == "toolu_1"
    assert answer[1] == text("note")
    assert answer[2] == text(ORPHAN_RESULT_PREFIX + "x")


def test_a_new_session_is_just_the_prompt() -> None:
    assert resumed([], "hello") == [{"role": "user", "content": "hello"}]
