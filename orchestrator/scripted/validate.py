"""The Messages API's request rules, checked the way the real API checks them.

The scripted model answers a request that breaks these rules with 400
`invalid_request_error`, as the real API does, so a client bug that produces an
invalid conversation (an unanswered `tool_use`, two user messages in a row)
fails in tests instead of in production. Written here rather than taken from a
library: the rules are the API's, and no maintained validator of them exists;
the messages imitate the API's wording (a field path, then what is wrong).
"""

from __future__ import annotations

from orchestrator.jsontypes import JSONObject, JSONValue

CONTENT_BLOCK_TYPES = frozenset(
    {
        "text",
        "image",
        "document",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "search_result",
        "container_upload",
    }
)
"""Block types the scripted model accepts in a message's content."""


class InvalidRequest(ValueError):
    """The request breaks a Messages API rule; the message is the API-style reason."""


def check_messages_request(body: JSONObject) -> None:
    """Raise InvalidRequest when `body` is not a valid Messages API request."""
    model = body.get("model")
    if model is None:
        raise InvalidRequest("model: Field required")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: Input should be a non-empty string")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise InvalidRequest("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise InvalidRequest("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise InvalidRequest("max_tokens: Input should be greater than or equal to 1")
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("messages: Field required")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Input should be a valid list")
    if not messages:
        raise InvalidRequest("messages: at least one message is required")
    check_messages(messages)


def check_messages(messages: list[JSONValue]) -> None:
    """Raise InvalidRequest unless `messages` is a valid conversation: first message
    from the user, roles alternating, non-empty content, every `tool_use` answered
    by a `tool_result` (same id, results first) in the immediately following user
    message, no `tool_result` without its `tool_use`, `tool_use` ids unique."""
    seen_ids: set[str] = set()
    previous_uses: list[str] = []
    previous_role: str | None = None
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where}: Input should be a valid dictionary")
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidRequest(f"{where}.role: Input should be 'user', 'assistant' or 'system'")
        if previous_role is None and role != "user":
            raise InvalidRequest('messages: first message must use the "user" role')
        if role == "system":
            _check_system(message.get("content"), where)
            continue
        if role == previous_role:
            raise InvalidRequest(
                f'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{role}" roles in a row'
            )
        final_assistant = role == "assistant" and index == len(messages) - 1
        blocks = _content_blocks(message.get("content"), where, final_assistant)
        if role == "user":
            _check_answers(blocks, previous_uses, where)
            previous_uses = []
        else:
            previous_uses = _check_uses(blocks, seen_ids, where)
            if previous_uses and index + 1 == len(messages):
                raise _unanswered(previous_uses, where)
        previous_role = role


def _check_system(content: JSONValue, where: str) -> None:
    blocks = _content_blocks(content, where, final_assistant=False)
    for position, block in enumerate(blocks):
        if block.get("type") != "text":
            raise InvalidRequest(f"{where}.content.{position}: a system message holds text only")


def _content_blocks(content: JSONValue, where: str, final_assistant: bool) -> list[JSONObject]:
    if isinstance(content, str):
        if not content and not final_assistant:
            raise InvalidRequest(
                f"{where}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content: Input should be a valid list or string")
    if not content and not final_assistant:
        raise InvalidRequest(
            f"{where}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    blocks: list[JSONObject] = []
    for position, block in enumerate(content):
        at = f"{where}.content.{position}"
        if not isinstance(block, dict):
            raise InvalidRequest(f"{at}: Input should be a valid dictionary")
        blocks.append(block)
        kind = block.get("type")
        if kind not in CONTENT_BLOCK_TYPES:
            raise InvalidRequest(f"{at}.type: Input tag {kind!r} found using 'type' does not match")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"{at}.text: Field required")
            if not text.strip():
                raise InvalidRequest(
                    f"{at}: text content blocks must contain non-whitespace text"
                    if text
                    else f"{at}: text content blocks must be non-empty"
                )
    return blocks


def _check_uses(blocks: list[JSONObject], seen: set[str], where: str) -> list[str]:
    uses: list[str] = []
    for position, block in enumerate(blocks):
        if block.get("type") == "tool_result":
            raise InvalidRequest(
                f"{where}.content.{position}: tool_result blocks may only appear in user messages"
            )
        if block.get("type") != "tool_use":
            continue
        use_id = block.get("id")
        if not isinstance(use_id, str) or not use_id:
            raise InvalidRequest(f"{where}.content.{position}.id: Field required")
        if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), dict):
            raise InvalidRequest(
                f"{where}.content.{position}: tool_use blocks need a `name` and an `input` object"
            )
        if use_id in seen:
            raise InvalidRequest(
                f"{where}.content.{position}: `tool_use` ids must be unique; {use_id} is repeated"
            )
        seen.add(use_id)
        uses.append(use_id)
    return uses


def _unanswered(missing: list[str], where: str) -> InvalidRequest:
    return InvalidRequest(
        f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message."
    )


def _check_answers(blocks: list[JSONObject], uses: list[str], where: str) -> None:
    answered: set[str] = set()
    results_done = False
    for position, block in enumerate(blocks):
        at = f"{where}.content.{position}"
        if block.get("type") != "tool_result":
            results_done = True
            continue
        use_id = block.get("tool_use_id")
        if use_id not in uses or use_id in answered:
            raise InvalidRequest(
                f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. "
                "Each `tool_result` block must have a corresponding `tool_use` block in the "
                "previous message."
            )
        if results_done:
            raise InvalidRequest(
                f"{at}: `tool_result` blocks must come before any other content in a user "
                "message that answers tool calls"
            )
        answered.add(use_id)
    missing = [use_id for use_id in uses if use_id not in answered]
    if missing:
        # The API names the assistant message whose calls went unanswered.
        previous = where.rsplit(".", 1)
        raise _unanswered(missing, f"{previous[0]}.{int(previous[1]) - 1}")
