"""The scripted model is as strict as the Messages API: a request whose
conversation breaks the API's rules (first role, alternation, unanswered or
orphaned tool calls, repeated ids, empty content, max_tokens, model) gets 400
`invalid_request_error` naming the rule, through the real anthropic SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from orchestrator.scripted import Conversation, Script, ScriptedModelServer, TextBlock, Turn
from orchestrator.scripted.validate import InvalidRequest, check_messages_request

MODEL = "claude-scripted"


def use(use_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": "Bash", "input": {"command": "ls"}}


def result(use_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": text}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks) if blocks else "hi"}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


TEXT = {"type": "text", "text": "go on"}


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    script = Script(
        conversations=[Conversation(name="any", turns=[Turn(content=[TextBlock(text="fine")])])]
    )
    with ScriptedModelServer(script).in_thread() as server:
        sdk = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        yield sdk
        sdk.close()


INVALID = [
    ([assistant(TEXT)], 'first message must use the "user" role'),
    ([user(), user()], 'found multiple "user" roles in a row'),
    ([user(), assistant(TEXT), assistant(TEXT), user()], 'multiple "assistant" roles'),
    (
        [user(), assistant(use("toolu_a")), user(TEXT)],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
        "after: toolu_a",
    ),
    (
        [user(), assistant(use("toolu_a"), use("toolu_b")), user(result("toolu_a"))],
        "without `tool_result` blocks immediately after: toolu_b",
    ),
    (
        [user(), assistant(use("toolu_a")), user(result("toolu_a")), assistant(use("toolu_b"))],
        "messages.3: `tool_use` ids were found without `tool_result`",
    ),
    (
        [user(result("toolu_x"))],
        "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x",
    ),
    (
        [user(), assistant(use("toolu_a")), user(TEXT), assistant(TEXT), user(result("toolu_a"))],
        "messages.1: `tool_use` ids were found without",
    ),
    (
        [user(), assistant(use("toolu_a")), user(TEXT, result("toolu_a"))],
        "`tool_result` blocks must come before any other content",
    ),
    (
        [
            user(),
            assistant(use("toolu_a")),
            user(result("toolu_a")),
            assistant(use("toolu_a")),
            user(result("toolu_a")),
        ],
        "`tool_use` ids must be unique",
    ),
    ([user(), {"role": "assistant", "content": []}, user()], "non-empty content"),
    ([{"role": "user", "content": ""}], "non-empty content"),
    ([user({"type": "text", "text": ""})], "text content blocks must be non-empty"),
]


@pytest.mark.parametrize(("messages", "reason"), INVALID)
def test_invalid_conversations_are_refused_like_the_api(
    client: anthropic.Anthropic, messages: list[Any], reason: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "invalid_request_error"
    assert reason in body["error"]["message"]


def test_a_valid_tool_round_trip_with_text_after_the_results_is_answered(
    client: anthropic.Anthropic,
) -> None:
    messages: Any = [
        user(),
        assistant(TEXT, use("toolu_a"), use("toolu_b")),
        user(result("toolu_b"), result("toolu_a"), TEXT),
        assistant(TEXT),
        user(),
    ]
    reply = client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    assert reply.stop_reason == "end_turn" and reply.content[0].type == "text"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"max_tokens": 5, "messages": [user()]}, "model: Field required"),
        ({"model": MODEL, "messages": [user()]}, "max_tokens: Field required"),
        ({"model": MODEL, "max_tokens": 0, "messages": [user()]}, "greater than or equal to 1"),
        ({"model": MODEL, "max_tokens": True, "messages": [user()]}, "valid integer"),
        ({"model": MODEL, "max_tokens": 5}, "messages: Field required"),
        ({"model": MODEL, "max_tokens": 5, "messages": []}, "at least one message"),
    ],
)
def test_required_fields(body: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        check_messages_request(body)
