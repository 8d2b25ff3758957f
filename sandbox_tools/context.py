"""Keep what the model is sent inside its context window (stdlib only).

The conversation (`AgentLoop.messages`, checkpointed to the host whole) only grows;
what is sent each turn is a *view* of it. Before a request would come near the
window (`context_window_tokens` of the spec, less `max_tokens` for the answer,
measured with the conservative `BYTES_PER_TOKEN`), room is made in two steps:

1. Clear the old tool results, all but the newest `KEEP_RESULTS` (all but the
   newest one when that is not enough): their content becomes `CLEARED_RESULT`
   (the `tool_use` that asked for them stays, so the model still sees that the
   call happened and what it was).
2. If that is not enough, the subagent summarises the oldest turns itself (one
   extra model call, counted like any other) and they are replaced, in the view,
   by one user message: the task's first message and that summary. The skill
   listing (the system-role message after the first message) stays after it.

The view is a pure function of the conversation and this state (the cleared ids,
the summary and how far it reaches), so between compactions each request starts
with exactly the blocks of the one before and the prompt cache keeps working;
compacting in large steps (every old result at once; a summary down to a
fraction of the room) keeps the cache misses rare.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sandbox_tools.conversation import SYSTEM_INDEX, leading_system
from sandbox_tools.jsontypes import JSONObject, JSONValue

BYTES_PER_TOKEN = 3
"""Request bytes per estimated token: over-counts (tokenizers average ~4 on text and
code), so the estimate errs towards compacting early, never towards a refusal."""
TRIGGER_SHARE = 0.85
"""Compact when a request's estimate passes this share of the room."""
TARGET_SHARE = 0.5
"""A summary keeps the newest turns that fit in half of this share of the room."""
KEEP_RESULTS = 4
"""The newest tool results are never cleared."""
MAX_FIRST_MESSAGE_CHARS = 20_000
"""How much of the task's first message the summary message repeats."""
MAX_SUMMARY_INPUT_BLOCK_CHARS = 4_000
"""Text blocks longer than this are cut (and say so) in the request for a summary."""

CLEARED_RESULT = (
    "[This tool result was cleared to keep the conversation inside the model's context "
    "window. The call above ran; repeat it if you need its output again.]"
)
SUMMARY_INSTRUCTION = (
    "The conversation is about to outgrow the context window, so the turns above will be "
    "replaced by your summary. Write that summary now, without calling tools: what the "
    "task is, what you did and found (files, commands, results, decisions), and what "
    "remains to do. Be complete but concise; it is all you will keep of these turns."
)
SUMMARY_HEADER = (
    "[Earlier turns of this conversation were replaced by the summary below (written by "
    "you) to keep it inside the context window. The full transcript is kept on the host.]"
)

Summarize = Callable[[list[JSONObject]], str]
"""Asks the model for a summary of these messages (ending with the instruction)."""


def estimate_tokens(value: JSONValue) -> int:
    """Tokens of a request, over-estimated from its JSON (non-ASCII escaped, as sent)."""
    return len(json.dumps(value)) // BYTES_PER_TOKEN + 1


def _text_of(content: JSONValue, limit: int) -> str:
    if isinstance(content, str):
        return content[:limit]
    blocks = content if isinstance(content, list) else []
    texts = [
        str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    ]
    return "\n".join(texts)[:limit]


def _cut_texts(message: JSONObject) -> JSONObject:
    content = message.get("content")
    if not isinstance(content, list):
        if isinstance(content, str) and len(content) > MAX_SUMMARY_INPUT_BLOCK_CHARS:
            return {**message, "content": content[:MAX_SUMMARY_INPUT_BLOCK_CHARS] + " [cut]"}
        return message
    blocks: list[JSONValue] = []
    for block in content:
        text = block.get("text") if isinstance(block, dict) else None
        if (
            isinstance(block, dict)
            and isinstance(text, str)
            and len(text) > MAX_SUMMARY_INPUT_BLOCK_CHARS
        ):
            block = {**block, "text": text[:MAX_SUMMARY_INPUT_BLOCK_CHARS] + " [cut]"}
        blocks.append(block)
    return {**message, "content": blocks}


def _listed(content: JSONValue) -> list[JSONValue]:
    return content if isinstance(content, list) else []


class ContextWindow:
    """The compaction state of one conversation, and the view it gives."""

    def __init__(self, window_tokens: int, max_tokens: int) -> None:
        self.room = max(1, window_tokens - max_tokens)
        self.cleared: set[tuple[int, int]] = set()
        """(message index, block index) of the tool results cleared in the view
        (positions, not ids: the conversation only grows, and ids need not be unique
        across a whole conversation, only within one request)."""
        self.summary: str | None = None
        self.summary_upto = 0
        """The summary stands for messages[:summary_upto] (an assistant message follows)."""
        self.compactions = 0

    def view(self, messages: list[JSONObject]) -> list[JSONObject]:
        """What is sent: the summary message, then the later messages with the cleared
        results replaced. New lists and dicts; `messages` is never changed."""
        out: list[JSONObject] = []
        if self.summary is not None:
            first = _text_of(messages[0].get("content"), MAX_FIRST_MESSAGE_CHARS)
            text = f"{first}\n\n{SUMMARY_HEADER}\n\n{self.summary}" if first else self.summary
            out.append({"role": "user", "content": [{"type": "text", "text": text}]})
            listing = leading_system(messages)
            if listing is not None:  # the skill listing outlives the turns summarised
                out.append(messages[SYSTEM_INDEX])
        for index in range(self.summary_upto, len(messages)):
            message = messages[index]
            content = message.get("content")
            if isinstance(content, list) and any(
                (index, i) in self.cleared for i in range(len(content))
            ):
                content = [
                    {**b, "content": CLEARED_RESULT}
                    if isinstance(b, dict) and (index, i) in self.cleared
                    else b
                    for i, b in enumerate(content)
                ]
                message = {**message, "content": content}
            out.append(message)
        return out

    def fits(self, request_tokens: int, share: float = TRIGGER_SHARE) -> bool:
        return request_tokens <= self.room * share

    def compact(
        self,
        messages: list[JSONObject],
        request_tokens: Callable[[list[JSONObject]], int],
        summarize: Summarize,
    ) -> bool:
        """Make room when the request for `messages` would not fit; True when the view
        changed. `request_tokens` estimates a whole request for a view."""
        before = self.compactions
        if self.clear(messages, request_tokens):
            return self.compactions != before
        wanted = self.summary_request(messages, request_tokens)
        if wanted is not None:
            head, upto = wanted
            self.set_summary(summarize(head), upto)
        return True

    def clear(
        self, messages: list[JSONObject], request_tokens: Callable[[list[JSONObject]], int]
    ) -> bool:
        """Step 1: True when the request fits (clearing old tool results if needed);
        False when only a summary can make room (`summary_request`)."""
        if self.fits(request_tokens(self.view(messages))):
            return True
        self.compactions += 1
        for keep in (KEEP_RESULTS, 1):
            self._clear_results(messages, keep)
            if self.fits(request_tokens(self.view(messages))):
                return True
        return False

    def _clear_results(self, messages: list[JSONObject], keep: int) -> None:
        results = [
            (index, i)
            for index in range(self.summary_upto, len(messages))
            for i, block in enumerate(_listed(messages[index].get("content")))
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        # All but the newest: clearing in one large step keeps compactions (and the
        # cache misses each one costs) rare.
        self.cleared.update(results[: max(0, len(results) - keep)])

    def summary_request(
        self, messages: list[JSONObject], request_tokens: Callable[[list[JSONObject]], int]
    ) -> tuple[list[JSONObject], int] | None:
        """Step 2: the messages to ask for a summary of (ending with the instruction),
        and how far into `messages` that summary reaches (for `set_summary`); None
        when there is nothing old enough to summarise."""
        view = self.view(messages)
        # The view's head (the first message, or the summary, and the skill listing
        # after it) is never summarised away.
        lead = SYSTEM_INDEX + 1 if leading_system(view) is not None else 1
        offset = self.summary_upto - (lead if self.summary is not None else 0)
        # Keep the newest turns that fit in half the target; summarise what is before.
        keep = len(view)
        for index in range(len(view) - 1, 0, -1):
            if view[index].get("role") != "assistant":
                continue
            if not self.fits(request_tokens(view[index:]), TARGET_SHARE / 2):
                break
            keep = index
        if keep == len(view):  # not even the last turn fits: keep only the newest answer
            keep = max(
                (i for i in range(1, len(view)) if view[i].get("role") == "assistant"),
                default=len(view),
            )
        if keep <= lead or keep >= len(view):
            return None  # nothing before the kept turns to summarise
        head = [_cut_texts(m) for m in view[:keep]]
        last = head[-1]
        content = last.get("content")
        blocks: list[JSONValue] = (
            list(content)
            if isinstance(content, list)
            else [{"type": "text", "text": content}]
            if isinstance(content, str) and content
            else []
        )
        blocks.append({"type": "text", "text": SUMMARY_INSTRUCTION})
        head[-1] = {**last, "content": blocks}
        return head, offset + keep

    def set_summary(self, text: str, upto: int) -> None:
        """The summary (written for `summary_request`) now stands for messages[:upto]."""
        self.summary, self.summary_upto = text, upto
