"""The scripted model server answers the real anthropic SDK (sync, async, streaming):
turn = assistant messages so far, first matching conversation wins, parallel
conversations stay apart, errors map to the SDK's exception classes (and a
once-only 529 is retried to success), and recordings redact the API key."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import ToolParam

from orchestrator.scripted import (
    Conversation,
    Match,
    Script,
    ScriptedError,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
    Turn,
)
from tests.json_shapes import arr, obj

MODEL = "claude-scripted"
SyncClient = Callable[..., anthropic.Anthropic]


@pytest.fixture
def sync_client() -> Iterator[SyncClient]:
    """Makes sync SDK clients and closes them after the test."""
    made: list[anthropic.Anthropic] = []

    def make(base_url: str, **kwargs: Any) -> anthropic.Anthropic:
        made.append(anthropic.Anthropic(base_url=base_url, **kwargs))
        return made[-1]

    yield make
    for client in made:
        client.close()


KEY = "sk-test-secret-123"


def _script(**kwargs: Any) -> Script:
    return Script(
        conversations=[
            Conversation(
                name="parent",
                match=Match(has_tool="Task"),
                turns=[
                    Turn(
                        content=[
                            TextBlock(text="Delegating."),
                            ToolUseBlock(name="Task", input={"prompt": "list files"}),
                            ToolUseBlock(name="Task", input={"prompt": "count lines"}),
                        ]
                    ),
                    Turn(content=[TextBlock(text="Done: {last_tool_result}")]),
                ],
            ),
            Conversation(
                name="lister",
                match=Match(prompt_contains="list files"),
                turns=[
                    Turn(content=[ToolUseBlock(name="Bash", input={"command": "ls"})]),
                    Turn(content=[TextBlock(text="files: {last_tool_result}")]),
                ],
            ),
            Conversation(
                name="slow",
                match=Match(prompt_contains="slowly"),
                turns=[Turn(content=[TextBlock(text="slept")], delay_s=0.3)],
            ),
            Conversation(
                name="flaky",
                match=Match(prompt_contains="flaky"),
                turns=[
                    Turn(
                        content=[TextBlock(text="recovered")],
                        error=ScriptedError(
                            status=529, message="busy", retry_after_s=0.05, times=1
                        ),
                    )
                ],
            ),
            Conversation(
                name="broken",
                match=Match(prompt_contains="always bad"),
                turns=[Turn(error=ScriptedError(status=400, message="scripted bad request"))],
            ),
        ],
        **kwargs,
    )


TASK_TOOL: ToolParam = {
    "name": "Task",
    "description": "delegate",
    "input_schema": {"type": "object"},
}
BASH_TOOL: ToolParam = {"name": "Bash", "description": "shell", "input_schema": {"type": "object"}}


def _tool_result(tool_use_id: str, text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}],
    }


def test_turns_follow_the_assistant_message_count(sync_client: SyncClient) -> None:
    with ScriptedModelServer(_script()).in_thread() as server:
        client = sync_client(server.base_url, api_key="x", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Please list files here"}]
        first = client.messages.create(
            model=MODEL, max_tokens=100, messages=messages, tools=[BASH_TOOL]
        )
        assert first.stop_reason == "tool_use"
        assert first.model == MODEL
        assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
        (call,) = first.content
        assert call.type == "tool_use" and call.name == "Bash" and call.input == {"command": "ls"}
        assert call.id.startswith("toolu_")
        messages += [
            {"role": "assistant", "content": [c.model_dump() for c in first.content]},
            _tool_result(call.id, "a.txt\nb.txt"),
        ]
        second = client.messages.create(model=MODEL, max_tokens=100, messages=messages)
        assert second.stop_reason == "end_turn"
        assert second.content[0].type == "text"
        assert second.content[0].text == "files: a.txt\nb.txt"
        # Past the end: a clear end_turn, not an error.
        messages += [
            {"role": "assistant", "content": "files: a.txt\nb.txt"},
            {"role": "user", "content": "and now?"},
        ]
        third = client.messages.create(model=MODEL, max_tokens=100, messages=messages)
        assert third.stop_reason == "end_turn"
        assert third.content[0].type == "text"
        assert "ran out after 2 turns" in third.content[0].text
        assert [r.turn for r in server.requests] == [0, 1, 2]
        assert {r.conversation for r in server.requests} == {"lister"}
        assert first._request_id and first._request_id.startswith("req_")


def test_tool_use_ids_are_deterministic_and_unique(sync_client: SyncClient) -> None:
    def ids(server: ScriptedModelServer, prompt: str) -> list[str]:
        client = sync_client(server.base_url, api_key="x", max_retries=0)
        reply = client.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": prompt}],
            tools=[TASK_TOOL],
        )
        return [b.id for b in reply.content if b.type == "tool_use"]

    with ScriptedModelServer(_script()).in_thread() as server:
        once, again, other = ids(server, "go"), ids(server, "go"), ids(server, "other task")
    assert len(once) == 2 and len(set(once)) == 2
    assert once == again
    assert not set(once) & set(other)


def test_exhausted_script_can_be_an_error(sync_client: SyncClient) -> None:
    script = _script(when_exhausted="error")
    with ScriptedModelServer(script).in_thread() as server:
        client = sync_client(server.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="has 1 turns"):
            client.messages.create(
                model=MODEL,
                max_tokens=10,
                messages=[
                    {"role": "user", "content": "do it slowly"},
                    {"role": "assistant", "content": "slept"},
                    {"role": "user", "content": "again"},
                ],
            )


def test_unknown_conversation_names_what_was_looked_for(sync_client: SyncClient) -> None:
    with ScriptedModelServer(_script()).in_thread() as server:
        client = sync_client(server.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hello"}]
            )
    message = str(caught.value)
    assert "no conversation in the script matches" in message
    assert "'hello'" in message
    assert "'lister' (prompt_contains='list files')" in message
    assert "'parent' (has_tool='Task')" in message
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": caught.value.body["error"]["message"],  # type: ignore[index]
        },
    }


def test_scripted_errors_raise_the_sdk_exception_classes(sync_client: SyncClient) -> None:
    with ScriptedModelServer(_script()).in_thread() as server:
        client = sync_client(server.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="scripted bad request"):
            client.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "always bad"}]
            )
        with pytest.raises(anthropic.InternalServerError) as caught:
            client.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "flaky one"}]
            )
        assert caught.value.status_code == 529
        assert caught.value.response.headers["retry-after-ms"] == "50"
        assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_overloaded_once_is_retried_by_the_sdk_and_succeeds(sync_client: SyncClient) -> None:
    with ScriptedModelServer(_script()).in_thread() as server:
        client = sync_client(server.base_url, api_key="x", max_retries=2)
        reply = client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "flaky call"}]
        )
        assert reply.content[0].type == "text" and reply.content[0].text == "recovered"
        assert [r.status for r in server.requests] == [529, 200]
        assert server.requests[1].headers.get("x-stainless-retry-count") == "1"


def test_wrong_or_missing_key_is_401_and_recordings_redact_it(
    tmp_path: Path, sync_client: SyncClient
) -> None:
    record = tmp_path / "requests.jsonl"
    with ScriptedModelServer(_script(), expected_api_key=KEY, record_path=record).in_thread() as s:
        good = sync_client(s.base_url, api_key=KEY, max_retries=0)
        good.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "slowly"}]
        )
        bad = sync_client(s.base_url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError, match="expects a different API key"):
            bad.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "slowly"}]
            )
        response = httpx2.post(f"{s.base_url}/v1/messages", json={"model": MODEL})
        assert response.status_code == 401
        requests = list(s.requests)
    assert [(r.api_key_present, r.api_key_matched, r.status) for r in requests] == [
        (True, True, 200),
        (True, False, 401),
        (False, False, 401),
    ]
    # The SDK sends its key as `x-api-key` or as a bearer token, depending on version.
    secrets = {k: v for k, v in requests[0].headers.items() if k in {"x-api-key", "authorization"}}
    assert secrets and set(secrets.values()) == {"[redacted]"}
    first = obj(arr(obj(requests[0].body)["messages"])[0])
    assert first["content"] == "slowly"
    text = record.read_text()
    assert KEY not in text and "sk-wrong" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["status"] for line in lines] == [200, 401, 401]


async def test_parallel_conversations_with_the_async_client() -> None:
    # The slow turn sleeps far longer than five requests take to arrive, even loaded.
    slow = Conversation(
        name="slow",
        match=Match(prompt_contains="slowly"),
        turns=[Turn(content=[TextBlock(text="slept")], delay_s=5.0)],
    )
    script = _script()
    script = script.model_copy(
        update={"conversations": [slow, *(c for c in script.conversations if c.name != "slow")]}
    )
    async with ScriptedModelServer(script) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0)

        async def ask(prompt: str) -> str:
            reply = await client.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": prompt}]
            )
            block = reply.content[0]
            return block.text if block.type == "text" else str(getattr(block, "name", ""))

        slow_asks = [asyncio.create_task(ask("do it slowly")) for _ in range(5)]
        while len(server.requests) < 5:  # all five slow turns are being served at once
            await asyncio.sleep(0.01)
        in_flight = [r.status for r in server.requests]
        fast = await ask("list files")  # answered while the five still sleep
        still_sleeping = sum(not t.done() for t in slow_asks)
        answers = await asyncio.gather(*slow_asks)
        await client.close()
    assert in_flight == [None] * 5
    assert fast == "Bash" and still_sleeping == 5
    assert answers == ["slept"] * 5


async def test_streaming_matches_the_plain_answer() -> None:
    async with ScriptedModelServer(_script()) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0)
        long_text = "x" * 150
        async with client.messages.stream(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": "go " + long_text}],
            tools=[TASK_TOOL],
        ) as stream:
            texts = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
        plain = await client.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": "go " + long_text}],
            tools=[TASK_TOOL],
        )
        await client.close()
    assert "".join(texts) == "Delegating."
    assert final.stop_reason == "tool_use"
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in plain.content]
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert server.requests[0].stream is True


def test_count_tokens_and_unknown_paths(sync_client: SyncClient) -> None:
    with ScriptedModelServer(_script()).in_thread() as server:
        client = sync_client(server.base_url, api_key="x", max_retries=0)
        counted = client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "y" * 400}]
        )
        assert 100 <= counted.input_tokens <= 130
        with pytest.raises(anthropic.NotFoundError, match="is not served"):
            client.models.list()
        response = httpx2.post(f"{server.base_url}/v1/messages", content=b"{not json")
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
        assert server.requests[-1].body_error is not None
        response = httpx2.post(
            f"{server.base_url}/v1/messages", json={"model": MODEL, "messages": []}
        )
        assert response.status_code == 400
        assert "max_tokens: Field required" in response.json()["error"]["message"]


def test_only_loopback_addresses_are_accepted() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        ScriptedModelServer(_script(), host="0.0.0.0")


async def test_a_client_that_gives_up_is_recorded_and_stop_does_not_wait() -> None:
    script = Script(
        conversations=[
            Conversation(name="stuck", turns=[Turn(content=[TextBlock(text="late")], delay_s=30)])
        ]
    )
    server = ScriptedModelServer(script)
    await server.start()
    client = anthropic.AsyncAnthropic(
        base_url=server.base_url, api_key="x", max_retries=0, timeout=0.3
    )
    with pytest.raises(anthropic.APITimeoutError):
        await client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    pending = asyncio.create_task(
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            timeout=60,
        )
    )
    while len(server.requests) < 2:
        await asyncio.sleep(0.01)
    started = time.monotonic()
    await server.stop()
    stopped_in = time.monotonic() - started
    with pytest.raises(anthropic.APIConnectionError):
        await pending
    await client.close()
    assert stopped_in < 5
    # The abandoned request is recorded as cut off (499), with its turn.
    assert server.requests[0].status == 499
    assert server.requests[0].turn == 0


async def test_streamed_requests_get_scripted_errors_as_statuses() -> None:
    async with ScriptedModelServer(_script()) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="scripted bad request"):
            async with client.messages.stream(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "always bad"}]
            ) as stream:
                await stream.get_final_message()
        await client.close()


def test_a_server_that_cannot_start_raises_in_the_caller() -> None:
    with ScriptedModelServer(_script()).in_thread() as first:
        port = int(first.base_url.rsplit(":", 1)[1])
        with (
            pytest.raises(OSError, match="address already in use"),
            ScriptedModelServer(_script(), port=port).in_thread(),
        ):
            pass
