"""The bodies the scripted model answers with: a Messages API message, or the
server-sent events that stream the same message."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Literal, TypedDict

from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.scripted.billing import CHARS_PER_TOKEN, Bill
from orchestrator.scripted.script import RequestView, StopReason, TextBlock, Turn, tool_use_id

STREAM_TEXT_CHUNK_CHARS = 64
"""Characters per `text_delta` event when streaming."""


class TextOut(TypedDict):
    """A text block of a reply."""

    type: Literal["text"]
    text: str


class ToolUseOut(TypedDict):
    """A tool_use block of a reply."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: JSONValue


class Message(TypedDict):
    """A Messages API response body, as the scripted model renders it."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[TextOut | ToolUseOut]
    stop_reason: StopReason
    stop_sequence: None
    usage: dict[str, JSONValue]


def estimate_tokens(value: object) -> int:
    """A rough token count: JSON characters / `CHARS_PER_TOKEN`, at least 1."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(text) // CHARS_PER_TOKEN)


def _sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def render_message(
    turn: Turn, conversation: str, view: RequestView, body: JSONObject, bill: Bill
) -> Message:
    """The Messages API response body for `turn`, filled from the request; its input
    usage is `bill` (what `billing` charged), unless the script sets usage itself."""
    instance = view.instance_key()
    content: list[TextOut | ToolUseOut] = []
    for index, block in enumerate(turn.content):
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": view.fill(block.text)})
        else:
            content.append(
                {
                    "type": "tool_use",
                    "id": tool_use_id(conversation, instance, view.turn, index),
                    "name": block.name,
                    "input": view.fill_value(block.input),
                }
            )
    usage: dict[str, JSONValue]
    if turn.usage is not None:
        usage = {
            **turn.usage.model_dump(),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    else:
        usage = bill.usage(estimate_tokens(content))
    model = body.get("model")
    return {
        "id": f"msg_{secrets.token_hex(12)}",
        "type": "message",
        "role": "assistant",
        "model": model if isinstance(model, str) else "scripted",
        "content": content,
        "stop_reason": turn.effective_stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


async def stream_events(message: Message) -> AsyncIterator[bytes]:
    """The SSE events the API sends for `message`, in order."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    yield _sse("message_start", {"type": "message_start", "message": start})
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opened: TextOut | ToolUseOut = {"type": "text", "text": ""}
            text = block["text"]
            deltas = [
                {"type": "text_delta", "text": text[i : i + STREAM_TEXT_CHUNK_CHARS]}
                for i in range(0, len(text), STREAM_TEXT_CHUNK_CHARS)
            ]
        else:
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": opened},
        )
        for delta in deltas:
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


async def broken_stream(message: Message, kind: str) -> AsyncIterator[bytes]:
    """The events of `message`, broken as `kind` says (`script.StreamFault`)."""
    events = [chunk async for chunk in stream_events(message)]
    if kind == "no_message_stop":
        for chunk in events[:-1]:
            yield chunk
        return
    # Up to the first delta of the last content block: inside that block.
    last_start = max(i for i, chunk in enumerate(events) if b"content_block_start" in chunk[:40])
    cut = last_start + 2 if kind == "cut_in_block" else last_start + 1
    for chunk in events[:cut]:
        yield chunk
    if kind in ("overloaded_error", "api_error"):
        message_text = "Overloaded" if kind == "overloaded_error" else "Internal server error"
        yield _sse("error", {"type": "error", "error": {"type": kind, "message": message_text}})
