"""An Anthropic-compatible Messages API server that replays a `Script`.

It speaks enough of the API for the real anthropic SDK: `POST /v1/messages`
(plain JSON and `stream: true` server-sent events), `POST /v1/messages/count_tokens`,
Anthropic's error shape with the usual statuses, a `request-id` header, and
usage billed by `billing` (prompt caching, the context window) from its token
estimate. Every request is recorded (API key
redacted) in `server.requests`, and optionally appended to a JSONL file.

It listens on loopback only. The reply bodies are built in `replies`.
Just over 400 lines, one idea: the HTTP surface of the fake API (plain and streamed
replies, errors, recording), kept in one place so it can be read against the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import secrets
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.scripted.billing import (
    DEFAULT_CONTEXT_WINDOW_TOKENS,
    BillingRefused,
    PromptCache,
    count_input_tokens,
)
from orchestrator.scripted.replies import (
    Message,
    broken_stream,
    render_message,
    stream_events,
)
from orchestrator.scripted.script import (
    RequestView,
    Script,
    ScriptedError,
    StreamFault,
    TextBlock,
    Turn,
)
from orchestrator.scripted.validate import InvalidRequest, check_messages_request

MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""Largest request body read; a bigger one gets 413 `request_too_large`."""

SHUTDOWN_GRACE_S = 0.5
"""How long `stop()` lets in-flight requests (a slow scripted turn) finish before
cancelling them."""

THREAD_START_TIMEOUT_S = 15.0
"""How long `in_thread()` waits for the server to start listening."""

REDACTED = "[redacted]"
SECRET_HEADERS = frozenset({"x-api-key", "authorization"})


class RecordedRequest(BaseModel):
    """One request the server received, as the server saw it (key redacted)."""

    model_config = ConfigDict(extra="forbid")

    received_at: float
    """Unix time of arrival."""
    request_id: str
    """The `request-id` the server answered with."""
    method: str
    path: str
    headers: dict[str, str]
    """Request headers, names lower-cased; `x-api-key` and `authorization` values are
    replaced by `[redacted]`."""
    api_key_present: bool
    """Whether the request carried an API key (`x-api-key` or a bearer token)."""
    api_key_matched: bool | None
    """Whether that key equals the expected key; None when no key is expected."""
    body: JSONValue = None
    """The JSON body; None when absent or not JSON (see `body_error`)."""
    body_error: str | None = None
    """Why the body could not be read as JSON."""
    conversation: str | None = None
    """The script conversation that answered it."""
    turn: int | None = None
    """The turn (assistant messages already in the request)."""
    status: int | None = None
    """HTTP status answered; None while still in progress."""
    stream: bool = False
    """Whether the answer was streamed."""
    usage: JSONValue = None
    """The usage billed for the answer (as in its body); None for errors."""


def _error(status: int, kind: str, message: str, request_id: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers={"request-id": request_id})


_Answer = Callable[[JSONObject, RecordedRequest], Awaitable[web.StreamResponse]]
"""Answers a request whose JSON body is an object (after auth and size checks)."""


class ScriptedModelServer:
    """Serve `script` on `http://127.0.0.1:<port>`; use `async with` or `in_thread()`."""

    def __init__(
        self,
        script: Script,
        *,
        expected_api_key: str | None = None,
        record_path: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
        context_windows: Mapping[str, int] | None = None,
        default_context_window: int = DEFAULT_CONTEXT_WINDOW_TOKENS,
    ) -> None:
        """`clock` times the prompt cache's lifetimes (a `billing.MovableClock` lets a
        test expire entries); `context_windows` maps a model to its window in tokens
        (others get `default_context_window`)."""
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the scripted model server listens on loopback only, not {host}")
        self.script = script
        self.expected_api_key = expected_api_key
        self.record_path = Path(record_path) if record_path is not None else None
        self.requests: list[RecordedRequest] = []
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._failures: dict[tuple[str, str, int], int] = {}
        self._record_lock = threading.Lock()
        self.cache = PromptCache(clock, context_windows, default_context_window)
        """The prompt cache and context windows every request is billed against."""

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`; pass it as the SDK's `base_url`."""
        if self._base_url is None:
            raise RuntimeError("the scripted model server is not started; call start() first")
        return self._base_url

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=SHUTDOWN_GRACE_S
        )
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self._host, self._port).start()
        except BaseException:
            await self.stop()
            raise
        sockets = self._runner.addresses
        port = sockets[0][1]
        self._base_url = f"http://{self._host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedModelServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[ScriptedModelServer]:
        """Run the server on its own event loop in a background thread (for sync callers)."""
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # handed to the caller's thread below
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name="scripted-model-server", daemon=True)
        thread.start()
        try:
            if not started.wait(THREAD_START_TIMEOUT_S):
                raise RuntimeError(
                    f"the scripted model server did not start within {THREAD_START_TIMEOUT_S} s"
                )
            if failure:
                raise failure[0]
            yield self
        finally:
            if not failure and thread.is_alive():
                stopping = asyncio.run_coroutine_threadsafe(self.stop(), loop)
                with contextlib.suppress(Exception):
                    stopping.result(THREAD_START_TIMEOUT_S)
                loop.call_soon_threadsafe(loop.stop)
            thread.join(THREAD_START_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()

    # -- recording ---------------------------------------------------------

    def _begin(self, request: web.Request, request_id: str) -> RecordedRequest:
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            name = name.lower()
            headers[name] = REDACTED if name in SECRET_HEADERS else value
        key: str | None = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if key is None and auth.lower().startswith("bearer "):
            key = auth[len("bearer ") :]
        matched = None
        if self.expected_api_key is not None:
            matched = key is not None and secrets.compare_digest(
                key.encode(), self.expected_api_key.encode()
            )
        record = RecordedRequest(
            received_at=time.time(),
            request_id=request_id,
            method=request.method,
            path=request.path,
            headers=headers,
            api_key_present=key is not None,
            api_key_matched=matched,
        )
        self.requests.append(record)
        return record

    def _finish(self, record: RecordedRequest, status: int) -> None:
        record.status = status
        if self.record_path is not None:
            line = record.model_dump_json() + "\n"
            with self._record_lock, self.record_path.open("a", encoding="utf-8") as handle:
                handle.write(line)

    async def _read_json(self, request: web.Request, record: RecordedRequest) -> JSONValue:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            record.body_error = f"body larger than {MAX_REQUEST_BYTES} bytes"
            raise
        if not raw:
            record.body_error = "empty body"
            return None
        try:
            record.body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            record.body_error = f"not JSON: {exc}"
            return None
        return record.body

    # -- handlers ----------------------------------------------------------

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        request_id = f"req_{secrets.token_hex(12)}"
        record = self._begin(request, request_id)
        response = _error(
            404,
            "not_found_error",
            f"{request.method} {request.path} is not served; the scripted model serves "
            "POST /v1/messages and POST /v1/messages/count_tokens",
            request_id,
        )
        self._finish(record, response.status)
        return response

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        async def answer(body: JSONObject, record: RecordedRequest) -> web.StreamResponse:
            return web.json_response(
                {"input_tokens": count_input_tokens(body)},
                headers={"request-id": record.request_id},
            )

        return await self._handle(request, answer)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        async def answer(body: JSONObject, record: RecordedRequest) -> web.StreamResponse:
            try:
                check_messages_request(body)
                prompt = self.cache.check(body)
            except (InvalidRequest, BillingRefused) as exc:
                return _error(400, "invalid_request_error", str(exc), record.request_id)
            view = RequestView(body)
            conversation = self.script.find(view)
            if conversation is None:
                looked_for = "; ".join(
                    f"{c.name!r} ({c.match.describe()})" for c in self.script.conversations
                )
                message = (
                    f"scripted model: no conversation in the script matches this request "
                    f"({view.describe()}). Conversations looked for: {looked_for}. "
                    "Add a conversation whose `match` fits this request."
                )
                return _error(400, "invalid_request_error", message, record.request_id)
            record.conversation = conversation.name
            record.turn = view.turn
            if view.turn >= len(conversation.turns):
                if self.script.when_exhausted == "error":
                    message = (
                        f"scripted model: conversation {conversation.name!r} has "
                        f"{len(conversation.turns)} turns, and this request asks for turn "
                        f"{view.turn}"
                    )
                    return _error(400, "invalid_request_error", message, record.request_id)
                turn = Turn(
                    content=[
                        TextBlock(
                            text=f"[scripted model] The script for conversation "
                            f"{conversation.name!r} ran out after {len(conversation.turns)} "
                            "turns; ending here."
                        )
                    ]
                )
            else:
                turn = conversation.turns[view.turn]
            if turn.delay_s:
                await asyncio.sleep(turn.delay_s)
            if turn.error is not None and self._should_fail(
                turn.error, conversation.name, view.instance_key(), view.turn
            ):
                return self._scripted_error(turn.error, record.request_id)
            bill = self.cache.bill(prompt)
            message_body = render_message(turn, conversation.name, view, body, bill)
            record.usage = dict[str, JSONValue](message_body["usage"])
            if body.get("stream") is True:
                record.stream = True
                fault = turn.stream_fault
                if fault is not None and not self._should_break(
                    fault, conversation.name, view.instance_key(), view.turn
                ):
                    fault = None
                return await self._stream(request, message_body, record.request_id, fault)
            return web.json_response(message_body, headers={"request-id": record.request_id})

        return await self._handle(request, answer)

    async def _handle(self, request: web.Request, answer: _Answer) -> web.StreamResponse:
        request_id = f"req_{secrets.token_hex(12)}"
        record = self._begin(request, request_id)
        response: web.StreamResponse | None = None
        try:
            try:
                body = await self._read_json(request, record)
            except web.HTTPRequestEntityTooLarge:
                response = _error(
                    413,
                    "request_too_large",
                    f"request body exceeds {MAX_REQUEST_BYTES} bytes",
                    request_id,
                )
                return response
            if record.api_key_matched is False:
                response = _error(
                    401,
                    "authentication_error",
                    "invalid x-api-key: the scripted model server expects a different API key",
                    request_id,
                )
                return response
            if not isinstance(body, dict):
                reason = record.body_error or "the body must be a JSON object"
                response = _error(400, "invalid_request_error", reason, request_id)
                return response
            response = await answer(body, record)
            return response
        finally:
            self._finish(record, response.status if response is not None else 499)

    def _should_fail(self, error: ScriptedError, name: str, instance: str, turn: int) -> bool:
        if error.times is None:
            return True
        key = (name, instance, turn)
        done = self._failures.get(key, 0)
        if done >= error.times:
            return False
        self._failures[key] = done + 1
        return True

    def _should_break(self, fault: StreamFault, name: str, instance: str, turn: int) -> bool:
        if fault.times is None:
            return True
        key = (f"stream:{name}", instance, turn)
        done = self._failures.get(key, 0)
        if done >= fault.times:
            return False
        self._failures[key] = done + 1
        return True

    @staticmethod
    def _scripted_error(error: ScriptedError, request_id: str) -> web.Response:
        if error.body is not None:
            response = web.json_response(
                error.body, status=error.status, headers={"request-id": request_id}
            )
        else:
            response = _error(error.status, error.error_type, error.message, request_id)
        if error.retry_after_s is not None:
            response.headers["retry-after"] = str(max(1, round(error.retry_after_s)))
            response.headers["retry-after-ms"] = str(round(error.retry_after_s * 1000))
        return response

    @staticmethod
    async def _stream(
        request: web.Request, message: Message, request_id: str, fault: StreamFault | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "request-id": request_id,
            }
        )
        await response.prepare(request)
        if fault is None:
            async for chunk in stream_events(message):
                await response.write(chunk)
        else:
            async for chunk in broken_stream(message, fault.kind):
                await response.write(chunk)
            if fault.kind == "reset":
                reset_connection(request)
                return response
        await response.write_eof()
        return response


def reset_connection(request: web.Request) -> None:
    """Reset the request's TCP connection (RST, not a clean close): a fault test's
    connection dropped mid-answer."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
