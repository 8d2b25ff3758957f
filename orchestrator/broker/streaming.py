"""Model calls streamed from the API, answered to the runner whole.

The broker asks the API with `stream: true` (the SDK's `AsyncMessageStream` parses
the server-sent events and assembles the message), so a long generation keeps its
connection busy instead of idling until it is cut, and the subagent's text reaches
the host while it is written: text deltas go to a `TextProgress`, which hands them
on at most every `PROGRESS_INTERVAL_S` (and once at the end) as progress events.
The runner still gets one Messages API response, as before: its wire does not change.

An error answered before the stream starts is an `APIStatusError` the SDK has
retried like any other; one the API sends inside the stream (an `error` event,
e.g. `overloaded_error`) ends the call with that error's body, unretried, as the
API documents for streams.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anthropic
from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import RawMessageStreamEvent

from orchestrator.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    import httpx2

PROGRESS_INTERVAL_S = 0.5
"""Least time between two progress events of one model call."""
MAX_PROGRESS_CHARS = 2_000
"""Most text one progress event carries (the newest part; the rest is announced)."""

TextSink = Callable[[str], Awaitable[None]]
"""Receives a stretch of the model's text as it streams (a progress event)."""


class NotAStreamError(Exception):
    """A 200 answer to a streamed request that is not server-sent events."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__("the answer to a streamed request is not an event stream")
        self.response = response


class TextProgress:
    """Collects text deltas and passes them to `sink`, throttled."""

    def __init__(
        self,
        sink: TextSink,
        interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.interval_s = interval_s
        self.clock = clock
        self._buffer: list[str] = []
        self._size = 0
        self._last = clock()

    async def add(self, text: str) -> None:
        self._buffer.append(text)
        self._size += len(text)
        if self.clock() - self._last >= self.interval_s:
            await self.flush()

    async def flush(self) -> None:
        if not self._buffer:
            return
        text = "".join(self._buffer)
        self._buffer, self._size, self._last = [], 0, self.clock()
        if len(text) > MAX_PROGRESS_CHARS:
            cut = len(text) - MAX_PROGRESS_CHARS + 40
            text = f"[... {cut} characters not shown] " + text[cut:]
        await self.sink(text)


async def stream_message(
    client: anthropic.AsyncAnthropic,
    path: str,
    body: dict[str, JSONValue],
    headers: dict[str, str],
    progress: TextProgress | None,
) -> tuple[JSONObject, httpx2.Response]:
    """POST `body` with `stream: true`; the assembled message (as the API's JSON) and
    the HTTP response. Raises the SDK's errors (APIStatusError for an error answered
    before or inside the stream, APIConnectionError, APITimeoutError)."""
    raw = await client.post(
        path,
        cast_to=anthropic.types.Message,
        body={**body, "stream": True},
        options={"headers": headers},
        stream=True,
        stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
    )
    kind = raw.response.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        await raw.close()
        raise NotAStreamError(raw.response)
    stream = AsyncMessageStream(raw, output_format=anthropic.NOT_GIVEN)
    try:
        async for event in stream:
            if event.type == "text" and progress is not None:
                await progress.add(event.text)
        message = await stream.get_final_message()
    finally:
        await stream.close()
    if progress is not None:
        await progress.flush()
    payload: JSONObject = message.model_dump(mode="json", exclude_unset=True)
    payload.pop("parsed_output", None)
    return payload, stream.response
