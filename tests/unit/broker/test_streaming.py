"""The broker streams model calls from the API (the real SDK against the scripted
server's server-sent events) and answers the runner with the same one message a
plain call gives; the model's text reaches the host as throttled `model_text`
progress events, which the live display shows; a 200 that is not an event stream
is a clear 502."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx2
import pytest

from orchestrator.broker import Upstream
from orchestrator.broker.model_calls import MAX_PROGRESS_CHARS, TextProgress
from orchestrator.broker.upstream import forward_messages, model_client
from orchestrator.results.models import Event
from orchestrator.scripted import (
    Conversation,
    Match,
    Script,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
    Turn,
)
from orchestrator.scripted.replies import STREAM_TEXT_CHUNK_CHARS
from orchestrator.ui.progress import Progress
from tests.json_shapes import arr, obj
from tests.unit.broker.test_upstream import Sandbox, _sandbox, body_for

LONG = " ".join(f"word{i}" for i in range(200))

SCRIPT = Script(
    conversations=[
        Conversation(
            name="talker",
            match=Match(prompt_contains="talk"),
            turns=[Turn(content=[TextBlock(text=LONG)])],
        ),
        Conversation(
            name="tooler",
            match=Match(prompt_contains="use a tool"),
            turns=[
                Turn(
                    content=[
                        TextBlock(text="Looking."),
                        ToolUseBlock(name="Bash", input={"command": "ls -la", "n": [1, 2]}),
                        ToolUseBlock(name="Read", input={"file_path": "/workspace/a.txt"}),
                    ]
                )
            ],
        ),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCRIPT).in_thread() as running:
        yield running


@pytest.fixture
async def sandbox(server: ScriptedModelServer) -> AsyncIterator[Sandbox]:
    async for s in _sandbox(server.base_url):
        yield s


async def test_a_streamed_call_answers_the_runner_with_the_plain_message(
    server: ScriptedModelServer, sandbox: Sandbox
) -> None:
    response = await sandbox.ask(body_for("talk to me"))
    assert response.status_code == 200
    streamed = response.json()
    assert server.requests[-1].stream is True  # the API was asked with stream: true
    plain_upstream = Upstream(model_client(server.base_url, None), stream=False)
    plain = await forward_messages(plain_upstream, body_for("talk to me"), [], None)
    await plain_upstream.client.close()
    assert server.requests[-1].stream is False
    assert isinstance(plain.payload, dict)
    assert streamed["content"] == plain.payload["content"] == [{"type": "text", "text": LONG}]
    for key in ("type", "role", "stop_reason", "usage"):
        assert streamed[key] == plain.payload[key], key
    # The model's text came to the host while it streamed, throttled into few events.
    texts = [e.detail for e in sandbox.host.events if e.kind == "model_text"]
    assert "".join(texts) == LONG
    assert len(texts) < len(LONG) / STREAM_TEXT_CHUNK_CHARS
    # Budget and transcript work as for a plain call.
    assert sandbox.broker.budget.turns_used == 1
    assert sandbox.broker.budget.usage["output_tokens"] == streamed["usage"]["output_tokens"]


async def test_a_streamed_answer_with_tool_calls_is_the_plain_one(
    server: ScriptedModelServer,
) -> None:
    """Text and tool_use blocks (their inputs streamed as JSON pieces) are assembled
    into the same message, block for block, that a plain call returns."""
    answers = []
    for stream in (True, False):
        upstream = Upstream(model_client(server.base_url, None), stream=stream)
        answers.append(await forward_messages(upstream, body_for("use a tool"), [], None))
        await upstream.client.close()
    streamed, plain = (a.payload for a in answers)
    assert isinstance(streamed, dict) and isinstance(plain, dict)
    assert [a.status for a in answers] == [200, 200]
    assert streamed["content"] == plain["content"]
    assert [obj(b)["type"] for b in arr(streamed["content"])] == ["text", "tool_use", "tool_use"]
    assert obj(arr(streamed["content"])[1])["input"] == {"command": "ls -la", "n": [1, 2]}
    assert streamed["stop_reason"] == plain["stop_reason"] == "tool_use"


def _event_stream_without_a_message(_: httpx2.Request) -> httpx2.Response:
    events = b'event: ping\ndata: {"type": "ping"}\n\n'
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=events)


def _json_that_is_not_a_message(_: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json={"hello": "proxy"})


@pytest.mark.parametrize("answer", [_event_stream_without_a_message, _json_that_is_not_a_message])
async def test_a_200_that_is_no_messages_answer_is_a_clear_502(
    answer: Callable[[httpx2.Request], httpx2.Response],
) -> None:
    """An event stream that never starts a message, and a 200 that is not an event
    stream at all: each a 502 naming what came back."""
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    upstream = Upstream(model_client("http://model.test", None, http_client=http))
    result = await forward_messages(upstream, body_for("x"), [], None)
    await http.aclose()
    assert result.status == 502
    assert isinstance(result.payload, dict)
    assert "not a Messages API response" in str(result.payload["error"])


async def test_text_progress_is_throttled_and_flushed_at_the_end() -> None:
    sent: list[str] = []
    now = [0.0]

    async def sink(text: str) -> None:
        sent.append(text)

    progress = TextProgress(sink, interval_s=0.5, clock=lambda: now[0])
    for piece in ("a", "b", "c"):
        await progress.add(piece)
    assert sent == []  # within the interval: held back
    now[0] = 0.6
    await progress.add("d")
    assert sent == ["abcd"]
    await progress.add("e")
    await progress.flush()
    assert sent == ["abcd", "e"]
    await progress.add("x" * (MAX_PROGRESS_CHARS * 2))
    await progress.flush()
    assert len(sent[-1]) <= MAX_PROGRESS_CHARS and sent[-1].startswith("[... ")


def test_the_display_shows_what_the_subagent_says() -> None:
    out = io.StringIO()
    progress = Progress(stream=out, json_mode=False)  # not a terminal: one line per event
    event: dict[str, Any] = {
        "ts": 1.0,
        "kind": "task_running",
        "run_id": "run_1",
        "task_id": "sa_1",
        "agent_type": "worker",
        "data": {"event": "model_text", "detail": "Looking at the \x1b[31mfiles"},
    }
    progress(Event.model_validate(event))
    line = out.getvalue()
    assert "sa_1" in line and "says: Looking at the" in line and "\x1b" not in line
