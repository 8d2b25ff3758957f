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
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import ParsedMessage, RawMessageStreamEvent

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
    # The SDK's own assembly (`accumulate_event`, what its `MessageStream` runs), fed
    # the raw events: `MessageStream` would also build a snapshot event for every
    # delta, which nothing here reads.
    message: ParsedMessage[None] | None = None
    json_bufs: dict[int, bytes] = {}
    try:
        async for event in raw:
            if message is None and event.type != "message_start":
                continue  # before the message starts (a ping): nothing to assemble
            message = accumulate_event(event=event, current_snapshot=message, json_bufs=json_bufs)
            if (
                progress is not None
                and event.type == "content_block_delta"
                and event.delta.type == "text_delta"
            ):
                await progress.add(event.delta.text)
    finally:
        await raw.close()
    if message is None:  # events, but never a message: not a Messages API stream
        raise NotAStreamError(raw.response)
    if progress is not None:
        await progress.flush()
    payload: JSONObject = message.model_dump(mode="json", exclude_unset=True)
    payload.pop("parsed_output", None)
    return payload, raw.response
