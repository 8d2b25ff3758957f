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

from typing import TYPE_CHECKING

import anthropic
from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import RawMessageStreamEvent

from orchestrator.broker.model_calls import TextProgress
from orchestrator.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    import httpx2


class NotAStreamError(Exception):
    """A 200 answer to a streamed request that is not server-sent events."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__("the answer to a streamed request is not an event stream")
        self.response = response


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
