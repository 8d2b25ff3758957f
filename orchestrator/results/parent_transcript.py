"""The parent agent's own conversation, kept so `warden logs RUN` can show it.

It wraps the parent's model client rather than the loop: after every model call the
conversation sent plus the answer received is written to
`STATE/runs/RUN/parent_transcript.json` (atomically, off the event loop), so what is
stored is exactly what the model saw and said, whatever the loop does with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from orchestrator.jsontypes import JSONObject, JSONValue
from sandbox_tools.caching import without_cache_control

if TYPE_CHECKING:
    from anthropic.types import Message, MessageParam, TextBlockParam, ToolParam

TRANSCRIPT_NAME = "parent_transcript.json"
USAGE_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
"""The token counts of the API's `usage`, each billed at its own rate."""
MAX_PARENT_TRANSCRIPT_CHARS = 32_000_000
"""Largest parent transcript kept; beyond it the file keeps the last version that fit
and says so (the run goes on)."""


class ModelRequest(TypedDict):
    """One call of the parent's model: the Messages API request, as JSON."""

    model: str
    max_tokens: int
    system: list[JSONObject]
    messages: list[JSONObject]
    tools: list[JSONObject]


ModelCallHook = Callable[[ModelRequest, "Message", float, float], Awaitable[None]]
"""Called after each model call with the request, the response, and when the call
started and ended (Unix time)."""


class MessagesAPI(Protocol):
    async def create(
        self,
        *,
        model: str,
        max_tokens: int,
        system: list[JSONObject],
        messages: list[JSONObject],
        tools: list[JSONObject],
    ) -> Message: ...


class ModelClient(Protocol):
    """What the parent's loop needs of its model client (`ObservedClient` is one)."""

    @property
    def max_retries(self) -> int: ...

    @property
    def messages(self) -> MessagesAPI: ...


class SdkMessages(Protocol):
    async def create(
        self,
        *,
        model: str,
        max_tokens: int,
        system: list[TextBlockParam],
        messages: list[MessageParam],
        tools: list[ToolParam],
    ) -> Message: ...


class SdkClient(Protocol):
    """What `ObservedClient` wraps: the SDK's `AsyncAnthropic`, or a client that is
    still being built and whose calls wait for it (`broker.client.PendingClient`)."""

    @property
    def max_retries(self) -> int: ...

    @property
    def messages(self) -> SdkMessages: ...


def transcript_path(state_dir: Path, run_id: str) -> Path:
    return state_dir / "runs" / run_id / TRANSCRIPT_NAME


class _Messages:
    def __init__(self, inner: SdkClient, hooks: list[ModelCallHook]) -> None:
        self._inner = inner
        self._hooks = hooks

    async def create(
        self,
        *,
        model: str,
        max_tokens: int,
        system: list[JSONObject],
        messages: list[JSONObject],
        tools: list[JSONObject],
    ) -> Message:
        request = ModelRequest(
            model=model, max_tokens=max_tokens, system=system, messages=messages, tools=tools
        )
        started = time.time()
        # The JSON is the Messages API's own shape (blocks it returned, tool results
        # and tool definitions built to its schema); the SDK checks nothing either.
        response = await self._inner.messages.create(
            model=model,
            max_tokens=max_tokens,
            system=cast("list[TextBlockParam]", system),
            messages=cast("list[MessageParam]", messages),
            tools=cast("list[ToolParam]", tools),
        )
        ended = time.time()
        for hook in self._hooks:
            await hook(request, response, started, ended)
        return response


class ObservedClient:
    """An anthropic client whose `messages.create` calls `hooks` after each answer;
    everything else is the wrapped client's."""

    def __init__(self, inner: SdkClient, hooks: list[ModelCallHook]) -> None:
        self._inner = inner
        self.hooks = hooks
        self.messages = _Messages(inner, hooks)

    @property
    def max_retries(self) -> int:
        return self._inner.max_retries


class ParentTranscript:
    """A model-call hook that saves the parent's conversation after each call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.truncated = False
        self.tokens = 0
        """The parent's tokens over its model calls so far (every usage field)."""
        self.usage: dict[str, int] = dict.fromkeys(USAGE_FIELDS, 0)
        """The same, field by field (`USAGE_FIELDS`)."""

    async def __call__(
        self, request: ModelRequest, response: Message, started: float, ended: float
    ) -> None:
        for name in USAGE_FIELDS:
            value = getattr(response.usage, name, None)
            if isinstance(value, int) and value > 0:
                self.usage[name] += value
                self.tokens += value
        content: list[JSONValue] = [
            # warnings=False: a malformed tool_use (input not an object) is kept as it came
            block.model_dump(mode="json", exclude_none=True, warnings=False)
            for block in response.content
        ]
        # Stored as the model saw it: without the prompt-caching breakpoints.
        system = "".join(str(b.get("text", "")) for b in request["system"])
        messages = without_cache_control(list[JSONValue](request["messages"]))
        document: JSONObject = {
            "model": request["model"],
            "system": system,
            "tools": [t.get("name") for t in request["tools"]],
            "messages": [
                *(messages if isinstance(messages, list) else []),
                {"role": "assistant", "content": content},
            ],
            "truncated": False,
            "tokens": self.tokens,
            "usage": dict[str, JSONValue](self.usage),
        }
        await asyncio.to_thread(self._write, document)

    def _write(self, document: JSONObject) -> None:
        text = json.dumps(document, default=str)
        if len(text) > MAX_PARENT_TRANSCRIPT_CHARS:
            if self.truncated or not self.path.exists():
                return
            self.truncated = True
            kept = json.loads(self.path.read_text(encoding="utf-8"))
            kept["truncated"] = True
            text = json.dumps(kept)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".parent-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, self.path)


def load_parent_transcript(state_dir: Path, run_id: str) -> JSONObject | None:
    path = transcript_path(state_dir, run_id)
    if not path.is_file():
        return None
    loaded: JSONValue = json.loads(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else None
