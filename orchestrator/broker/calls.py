"""The broker's ledger of tool calls the permission gate approved.

Transcripts come from the container, so a `tool_use`/`tool_result` pair in one
proves nothing: the model may never have asked for it and the tool may never
have run. What the host acts on after a call (PostToolUse hooks) is driven by
this ledger only: a call is entered when the gate allows it, with the input the
gate approved (a hook's `updatedInput` included), and taken out exactly once,
when a tool_result with its id shows up. The result text is the container's
word, and is passed on as data.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from orchestrator.jsontypes import JSONObject, JSONValue

MAX_PENDING_CALLS = 1_000
"""Approved calls awaiting their result; the oldest are forgotten beyond this."""
MAX_RESPONSE_CHARS = 100_000
"""Longest tool_result text passed on to PostToolUse hooks (cut, and said so)."""


@dataclass(frozen=True)
class ApprovedCall:
    tool_use_id: str
    tool_name: str
    tool_input: JSONObject


class ApprovedCalls:
    """Calls the gate allowed, by tool_use id, each reported at most once."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, ApprovedCall] = OrderedDict()

    def approve(self, call: ApprovedCall) -> None:
        self._pending.pop(call.tool_use_id, None)
        self._pending[call.tool_use_id] = call
        while len(self._pending) > MAX_PENDING_CALLS:
            self._pending.popitem(last=False)

    def __len__(self) -> int:
        return len(self._pending)

    def finished_in(
        self, messages: Sequence[JSONValue]
    ) -> Iterator[tuple[ApprovedCall, JSONObject]]:
        """(approved call, response) for each tool_result in `messages` that answers
        a pending approved call; anything else in the transcript is ignored."""
        if not self._pending:
            return
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict) or block.get("type") != "tool_result":
                    continue
                use_id = block.get("tool_use_id")
                call = self._pending.pop(use_id, None) if isinstance(use_id, str) else None
                if call is not None:
                    yield (
                        call,
                        {
                            "content": _bounded(block.get("content")),
                            "is_error": bool(block.get("is_error")),
                        },
                    )


def _bounded(content: JSONValue) -> JSONValue:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    else:
        return ""
    if len(text) > MAX_RESPONSE_CHARS:
        return text[:MAX_RESPONSE_CHARS] + f"\n[truncated to {MAX_RESPONSE_CHARS} characters]"
    return text
