"""Keep a Messages API conversation valid when it is resumed.

A transcript is checkpointed after every model call and after every round of
tool results, so a crash between the two leaves an assistant `tool_use` that no
`tool_result` answers; the API refuses such a conversation (400). `repair`
turns whatever a crash can leave into a conversation the API accepts, without
inventing what the tools did: every unanswered call gets an `is_error` result
saying it was interrupted and that its effect is unknown. `append_user_text`
adds the next instruction without breaking the user/assistant alternation.

One `system`-role message has a place in a conversation, as Claude Code sends it:
right after the first user message (`SYSTEM_INDEX`), the skill listing
(`with_listing`). `repair` keeps it there; the broker accepts a system-role message
nowhere else (`misplaced_system`).

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

SYSTEM_INDEX = 1
"""Where the one `system`-role message of a conversation stands: right after the first
user message (Claude Code's place for its skill listing)."""
SYSTEM_MESSAGE_BETA = "mid-conversation-system-2026-04-07"
"""The `anthropic-beta` value Claude Code sends with a system-role message in
`messages` (measured); the broker adds it upstream to a request carrying the one it
accepts."""


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


def _system_text(content: JSONValue) -> str | None:
    """The text of a system-role message's content (a string, or text blocks only,
    as the API's `system` field takes); None for anything else."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            return None
        if set(block) - {"type", "text", "cache_control"}:
            return None
        text = block.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return "".join(texts)


def leading_system(messages: Sequence[JSONValue]) -> JSONObject | None:
    """The system-role message at `SYSTEM_INDEX` after a first user message (its text
    as a string), or None."""
    if len(messages) <= SYSTEM_INDEX:
        return None
    first, second = messages[0], messages[SYSTEM_INDEX]
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return None
    if first.get("role") != "user" or second.get("role") != "system":
        return None
    text = _system_text(second.get("content"))
    return {"role": "system", "content": text} if text else None


def with_listing(messages: list[JSONObject], listing: str) -> list[JSONObject]:
    """`messages` (a new conversation: its first user message) with `listing` as a
    system-role message at `SYSTEM_INDEX`, as Claude Code sends its skill listing;
    unchanged when `listing` is empty or the conversation has one already."""
    if not listing or not messages or leading_system(messages) is not None:
        return messages
    system: JSONObject = {"role": "system", "content": listing}
    return [*messages[:SYSTEM_INDEX], system, *messages[SYSTEM_INDEX:]]


def misplaced_system(messages: Sequence[JSONValue], expected: str | None) -> str | None:
    """Why the system-role messages of a request are not where (and what) warden's
    runner would send, or None when they are: at most one, at `SYSTEM_INDEX` after a
    user message, its content text only and equal to `expected` (the listing the host
    gave this conversation; None: no system-role message belongs in it)."""
    at = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "system"]
    if not at:
        return None
    if expected is None:
        return (
            f"message {at[0]} has role 'system', but this subagent was given no skill "
            "listing, the only system-role message warden's runner sends"
        )
    if at != [SYSTEM_INDEX]:
        where = next(i for i in at if i != SYSTEM_INDEX)
        return (
            f"message {where} has role 'system'; one is accepted only at index "
            f"{SYSTEM_INDEX}, right after the first user message (the skill listing)"
        )
    first = messages[0]
    if not isinstance(first, dict) or first.get("role") != "user":
        return "a role 'system' message is accepted only after the first user message"
    second = messages[SYSTEM_INDEX]
    content = second.get("content") if isinstance(second, dict) else None
    if _system_text(content) != expected:
        return (
            f"message {SYSTEM_INDEX} (role 'system') is not the skill listing the host gave "
            "this subagent; its content must be that text (a string, or text blocks)"
        )
    return None


def repair(messages: Sequence[JSONValue]) -> list[JSONObject]:
    """A copy of `messages` that the Messages API accepts as the start of a
    conversation: empty messages and text blocks dropped, consecutive same-role
    messages merged, every `tool_use` answered in the next user message (an
    interrupted call gets `INTERRUPTED_RESULT`), tool results first in their
    message, and tool results without their call kept as plain text. The
    system-role message at `SYSTEM_INDEX` (the skill listing) is kept there; a
    system-role message anywhere else is dropped (the broker sends none)."""
    system = leading_system(messages)
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
    out: list[JSONObject] = [
        {"role": m["role"], "content": list[JSONValue](m["content"])} for m in repaired
    ]
    if system is not None and out and out[0]["role"] == "user":
        out.insert(SYSTEM_INDEX, system)
    return out


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
