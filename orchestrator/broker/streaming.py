"""Model calls streamed from the API, answered to the runner whole.

The broker asks the API with `stream: true` (the SDK's `AsyncMessageStream` parses
the server-sent events and assembles the message), so a long generation keeps its
connection busy instead of idling until it is cut, and the subagent's text reaches
the host while it is written: text deltas go to a `TextProgress`, which hands them
on at most every `PROGRESS_INTERVAL_S` (and once at the end) as progress events.
The runner still gets one Messages API response, as before: its wire does not change.

An error answered before the stream starts is an `APIStatusError` the SDK has
retried like any other. What happens once the stream has started is past the SDK's
retry loop, so it is retried here, as one more attempt of the same call: a stream
that ends without `message_stop` (cleanly, or inside a content block: a tool input
cut in half is no answer), a connection reset or timeout mid-stream, and an
`overloaded_error` or `api_error` event inside the stream. The call's attempts
(the SDK's and these) share one count, the client's `max_retries`, and one clock,
`retry.RetryBudget`'s (`retry.one_call`), so there is still one retry budget per
call. Any other `error` event ends the call with that error's body, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import anthropic
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import ParsedMessage, RawMessageStreamEvent

from orchestrator.broker.model_calls import TextProgress
from orchestrator.broker.retry import budget_of, one_call, stream_retry_delay
from orchestrator.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    import httpx2

RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error"})
"""Types of an `error` event inside a stream that a later attempt may not meet."""


class NotAStreamError(Exception):
    """A 200 answer to a streamed request that is not server-sent events."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__("the answer to a streamed request is not an event stream")
        self.response = response


class StreamBroken(Exception):
    """A streamed answer that did not arrive whole; `what` says how it ended."""

    def __init__(
        self, what: str, *, attempts: int, kind: str | None = None, total: int = 0
    ) -> None:
        super().__init__(what)
        self.what = what
        self.attempts = attempts
        """HTTP attempts the SDK made for this stream (1 unless it retried its start)."""
        self.kind = kind
        """The API's error type for an `error` event; None for a cut stream."""
        self.total = total
        """Attempts of the whole call when it gave up (set when raised for good)."""
        self.stopped: str | None = None
        """Why no further attempt was made, when that was not the attempt count."""


async def stream_message(
    client: anthropic.AsyncAnthropic,
    path: str,
    body: dict[str, JSONValue],
    headers: dict[str, str],
    progress: TextProgress | None,
    on_broken: Callable[[StreamBroken], None] | None = None,
) -> tuple[JSONObject, httpx2.Response]:
    """POST `body` with `stream: true`; the assembled message (as the API's JSON) and
    the HTTP response. A stream that breaks is asked again (`on_broken` hears of each
    break) while the call's attempts and time last. Raises the SDK's errors
    (APIStatusError for an error answered before the stream or a non-retryable one
    inside it, APIConnectionError, APITimeoutError) and StreamBroken."""
    budget = budget_of(client)
    used = 0
    with one_call() as started:
        while True:
            try:
                return await _stream_once(
                    client, path, body, headers, progress, client.max_retries - used
                )
            except StreamBroken as broken:
                used += broken.attempts
                if on_broken is not None:
                    on_broken(broken)
                delay = stream_retry_delay(used)
                if used > client.max_retries:
                    broken.total = used
                    raise
                if budget is not None and budget.spent_after(started, delay):
                    broken.total = used
                    broken.stopped = f"the retry budget of {budget.total_s:g} s is spent"
                    raise
            await asyncio.sleep(delay)


async def _stream_once(
    client: anthropic.AsyncAnthropic,
    path: str,
    body: dict[str, JSONValue],
    headers: dict[str, str],
    progress: TextProgress | None,
    max_retries: int,
) -> tuple[JSONObject, httpx2.Response]:
    raw = await client.post(
        path,
        cast_to=anthropic.types.Message,
        body={**body, "stream": True},
        options={"headers": headers, "max_retries": max_retries},
        stream=True,
        stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
    )
    attempts = _attempts_of(raw.response)
    kind = raw.response.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        await raw.close()
        raise NotAStreamError(raw.response)
    # The SDK's own assembly (`accumulate_event`, what its `MessageStream` runs), fed
    # the raw events: `MessageStream` would also build a snapshot event for every
    # delta, which nothing here reads.
    message: ParsedMessage[None] | None = None
    json_bufs: dict[int, bytes] = {}
    open_block: tuple[int, str] | None = None
    complete = False
    try:
        async for event in raw:
            if message is None and event.type != "message_start":
                continue  # before the message starts (a ping): nothing to assemble
            message = accumulate_event(event=event, current_snapshot=message, json_bufs=json_bufs)
            if event.type == "content_block_start":
                open_block = (event.index, event.content_block.type)
            elif event.type == "content_block_stop":
                open_block = None
            elif event.type == "message_stop":
                complete = True
            elif (
                progress is not None
                and event.type == "content_block_delta"
                and event.delta.type == "text_delta"
            ):
                await progress.add(event.delta.text)
    except anthropic.APIStatusError as exc:
        error_type = _error_type(exc.body)
        if exc.status_code >= 400 or error_type not in RETRYABLE_STREAM_ERRORS:
            raise
        raise StreamBroken(
            f"the API sent {error_type} inside the stream: {_error_message(exc.body)}",
            attempts=attempts,
            kind=error_type,
        ) from None
    except anthropic.APIConnectionError as exc:  # reset, timeout: mid-stream
        cause = exc.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else type(exc).__name__
        raise StreamBroken(
            f"the connection broke in the middle of the stream ({detail})", attempts=attempts
        ) from None
    finally:
        await raw.close()
    if message is None:  # events, but never a message: not a Messages API stream
        raise NotAStreamError(raw.response)
    if not complete:
        where = (
            f"inside content block {open_block[0]} ({open_block[1]})"
            if open_block is not None
            else "after its last content block"
        )
        raise StreamBroken(
            f"the stream ended {where}, without message_stop: an incomplete answer",
            attempts=attempts,
        )
    if progress is not None:
        await progress.flush()
    payload: JSONObject = message.model_dump(mode="json", exclude_unset=True)
    payload.pop("parsed_output", None)
    return payload, raw.response


def _attempts_of(response: httpx2.Response) -> int:
    """HTTP attempts the SDK made for this response (its retry count, plus one)."""
    try:
        return int(response.request.headers.get("x-stainless-retry-count", "0")) + 1
    except ValueError:
        return 1


def _error_type(body: object) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _error_message(body: object) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return " ".join(str(message).split())[:200] if message is not None else "(no message)"
