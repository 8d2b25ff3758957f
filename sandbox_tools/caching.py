"""Prompt-caching breakpoints for a Messages API request (stdlib only).

The API caches the prompt prefix (tools -> system -> messages) up to each block that
carries `cache_control`, and a later request whose prefix is byte-identical reads it
at a tenth of the input price. An agent loop resends everything each turn, so it
marks, on a copy of the request (the conversation itself is never changed):

- the last tool definition (the tool list is the same every turn),
- the system prompt,
- the last block of the newest message (what this turn writes), and
- the last block of the message the previous request ended with (what it wrote,
  so a turn that adds many blocks still finds it: the API looks back only about
  20 blocks from a breakpoint).

That is `MAX_BREAKPOINTS`, the API's limit. Breakpoints left in earlier messages (a
resumed transcript) are removed first, and string contents are written as one text
block, so each turn serialises the shared prefix exactly as the turn before did. A
system-role message (the skill listing after the first user message) is sent as it
is, a string, and never marked: it is not a turn (Claude Code marks neither).
The host's parent loop uses the same function.
"""

from __future__ import annotations

from sandbox_tools.jsontypes import JSONObject, JSONValue

MAX_BREAKPOINTS = 4
"""Blocks with `cache_control` the API accepts in one request."""

EPHEMERAL: JSONObject = {"type": "ephemeral"}


def _marked(block: JSONObject) -> JSONObject:
    return {**block, "cache_control": dict(EPHEMERAL)}


def _plain_blocks(content: JSONValue) -> list[JSONValue]:
    """Content as a list of blocks without `cache_control` (strings become one block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    return [
        {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(block, dict)
        else block
        for block in content
    ]


def system_blocks(system: str) -> list[JSONObject]:
    """The system prompt as one cached text block (none when it is empty)."""
    return [_marked({"type": "text", "text": system})] if system else []


def cached_tools(tools: list[JSONObject]) -> list[JSONObject]:
    """The tool definitions with a breakpoint on the last one."""
    out = [dict(t) for t in tools]
    if tools:
        out[-1] = _marked(tools[-1])
    return out


def without_cache_control(value: JSONValue) -> JSONValue:
    """`value` with every `cache_control` key removed: the conversation as the model
    sees it (breakpoints change the bill, never the content)."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def cached_messages(messages: list[JSONObject]) -> list[JSONObject]:
    """A copy of `messages` with the two rolling breakpoints (see the module doc)."""
    out: list[JSONObject] = [
        {**m, "content": without_cache_control(m.get("content"))}
        if m.get("role") == "system"
        else {**m, "content": _plain_blocks(m.get("content"))}
        for m in messages
    ]
    # The newest message, and the one the previous request ended with (two back:
    # that request's answer and this turn's user message came after it), counting
    # user and assistant messages only: the system-role message (the skill listing,
    # sent as a string) carries none, as in Claude Code, whose first request marks
    # the first user message, before the listing.
    turns = [i for i, m in enumerate(out) if m.get("role") != "system"]
    for back in (1, 3):
        if back > len(turns):
            continue
        blocks = out[turns[-back]]["content"]
        if isinstance(blocks, list) and blocks and isinstance(blocks[-1], dict):
            blocks[-1] = _marked(blocks[-1])
    return out
