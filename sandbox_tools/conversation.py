"""Keep a Messages API conversation valid when it is resumed.

A transcript is checkpointed after every model call and after every round of
tool results, so a crash between the two leaves an assistant `tool_use` that no
`tool_result` answers; the API refuses such a conversation (400). `repair`
turns whatever a crash can leave into a conversation the API accepts, without
inventing what the tools did: every unanswered call gets an `is_error` result
saying it was interrupted and that its effect is unknown. `append_user_text`
adds the next instruction without breaking the user/assistant alternation.

Both sides use it: the host repairs a session before resuming it, the runner
appends the prompt. Plain dicts in, new plain dicts out; the input is never
modified.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypedDict

from sandbox_tools.jsontypes import JSONObject, JSONValue

INTERRUPTED_RESULT = (
    "Interrupted: the session stopped (the orchestrator crashed or was stopped) after this "
    "tool call was requested and before its result was recorded. Its effect is unknown: it "
    "may have run, completely or in part, or not at all. Check the current state before "
    "relying on it or repeating it."
)
"""The `tool_result` text of a call whose result a crash lost."""

ORPHAN_RESULT_PREFIX = "[a tool result whose tool call is missing from the transcript]\n"
"""Prefix of the text a `tool_result` without its `tool_use` is turned into."""

ROLES = ("user", "assistant")


def _blocks(content: JSONValue) -> list[JSONObject]:
    """Content as a list of blocks, without empty text blocks (the API refuses them)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        return []
    kept: list[JSONObject] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text.strip():
                continue
        kept.append(dict(block))
    return kept


def _result_text(content: JSONValue) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            if isinstance(b, dict) and b.get("type") == "text"
            else json.dumps(b)
            for b in content
        )
    return ""


def _orphan_to_text(block: JSONObject) -> JSONObject:
    return {"type": "text", "text": ORPHAN_RESULT_PREFIX + _result_text(block.get("content"))}


def interrupted_result(tool_use_id: str) -> JSONObject:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": INTERRUPTED_RESULT,
        "is_error": True,
    }


class _Message(TypedDict):
    """A message while it is repaired: a known role, its content as blocks."""

    role: str
    content: list[JSONObject]


def _merged(messages: Sequence[JSONValue]) -> list[_Message]:
    """Known roles only, empty messages dropped, consecutive same-role messages merged."""
    merged: list[_Message] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            continue
        blocks = _blocks(message.get("content"))
        if not blocks:
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    return merged


def _tool_use_ids(message: _Message) -> list[str]:
    ids: list[str] = []
    for block in message["content"]:
        use_id = block.get("id")
        if block.get("type") == "tool_use" and isinstance(use_id, str) and use_id not in ids:
            ids.append(use_id)
    return ids


def _answer(uses: list[str], message: _Message | None) -> _Message:
    """The user message that follows an assistant message calling `uses`: a result
    for every call (tool_result blocks first, in call order), orphans as text."""
    results: dict[str, JSONObject] = {}
    others: list[JSONObject] = []
    for block in message["content"] if message else []:
        use_id = block.get("tool_use_id")
        if block.get("type") != "tool_result":
            others.append(block)
        elif isinstance(use_id, str) and use_id in uses and use_id not in results:
            results[use_id] = block
        else:
            others.append(_orphan_to_text(block))
    answered = [results.get(use_id) or interrupted_result(use_id) for use_id in uses]
    return {"role": "user", "content": [*answered, *others]}


def repair(messages: Sequence[JSONValue]) -> list[JSONObject]:
    """A copy of `messages` that the Messages API accepts as the start of a
    conversation: empty messages and text blocks dropped, consecutive same-role
    messages merged, every `tool_use` answered in the next user message (an
    interrupted call gets `INTERRUPTED_RESULT`), tool results first in their
    message, and tool results without their call kept as plain text."""
    merged = _merged(messages)
    repaired: list[_Message] = []
    index = 0
    while index < len(merged):
        message = merged[index]
        index += 1
        if message["role"] == "user":
            # Not preceded by an assistant message with tool calls: no result belongs here.
            content = [
                _orphan_to_text(b) if b.get("type") == "tool_result" else b
                for b in message["content"]
            ]
            repaired.append({"role": "user", "content": content})
            continue
        repaired.append(message)
        uses = _tool_use_ids(message)
        if not uses:
            continue
        following = merged[index] if index < len(merged) else None
        if following is not None:
            index += 1  # always a user message: same roles were merged
        repaired.append(_answer(uses, following))
    return [{"role": m["role"], "content": list[JSONValue](m["content"])} for m in repaired]


def append_user_text(messages: list[JSONObject], text: str) -> list[JSONObject]:
    """`messages` plus `text` from the user: a new user message, or a text block added
    after the tool results when the conversation already ends with a user message."""
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        last_content = last.get("content")
        content: list[JSONValue] = (
            list[JSONValue](_blocks(last_content))
            if isinstance(last_content, str)
            else list(last_content)
            if isinstance(last_content, list)
            else []
        )
        return [
            *messages[:-1],
            {"role": "user", "content": [*content, {"type": "text", "text": text}]},
        ]
    return [*messages, {"role": "user", "content": text}]
