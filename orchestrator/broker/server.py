"""The broker: the one channel between a subagent container and the host.

One broker per subagent, serving HTTP on a Unix socket in a directory that is
bind-mounted into that container only. It forwards model calls upstream with
the real API key (which never leaves the host), enforces the subagent's turn
and token budgets, and hands permission requests, events, transcripts and the
result to the host through `BrokerHost`.

Everything that arrives here is untrusted: bodies are size-capped before they
are parsed, validated with the wire models, and a bad request gets a 4xx in
Anthropic's error shape and is recorded, never an exception on the host.
What is forwarded upstream (by `upstream`) is decided by `forwarding`, what it may cost by
`budget`, how much the container may make the host write by `limits`, and who
may connect, how often and for how long by `listener`. Transcripts are stored
as data; what acts on finished calls is driven by the gate's approvals
(`calls`), never by transcript content.

It owns one idea: the table of the socket's endpoints, each a short handler that
caps, validates, hands over to `BrokerHost` (`host`) and answers. How a body is read
(capped, timed, parsed, validated) is `bodies`; every other check they share lives
in the sibling modules named above.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import ValidationError

from orchestrator.broker import wire_models
from orchestrator.broker.bodies import RequestRejected, parse, read_json, read_sized_json, validate
from orchestrator.broker.budget import (
    MAX_OBJECTS_WALKED,
    Admission,
    Budget,
    BudgetRefused,
    estimate_input_tokens,
)
from orchestrator.broker.calls import ApprovedCall, ApprovedCalls
from orchestrator.broker.client import Upstream
from orchestrator.broker.documents import DocumentCost, PageCounts
from orchestrator.broker.forwarding import ForwardingRefused, check_request
from orchestrator.broker.forwarding_policy import ForwardDecision, ForwardingPolicy
from orchestrator.broker.host import BrokerHost
from orchestrator.broker.limits import Allowance, flood_allowances
from orchestrator.broker.listener import (
    ConnectionBudget,
    Listener,
    SandboxIdentity,
)
from orchestrator.broker.model_calls import (
    TextProgress,
    UpstreamAnswer,
    UpstreamFailures,
    describe_retries,
)
from orchestrator.errors import WardenError
from orchestrator.jsontypes import JSONObject
from sandbox_tools import conversation, wire
from sandbox_tools.caching import without_cache_control

log = logging.getLogger(__name__)

SOCKET_NAME = "broker.sock"
MAX_REJECTIONS_RECORDED = 100
"""After this many rejected requests from one container, stop recording each one."""
MAX_DECISIONS_AUDITED_PER_REQUEST = 20
"""Forwarding decisions audited for one model request (the refusal names them all)."""


@dataclass
class Broker:
    """Serves one subagent's socket. `async with Broker(...)` starts and stops it."""

    socket_dir: Path
    spec: wire_models.TaskSpec
    upstream: Upstream
    host: BrokerHost
    budget: Budget
    forwarding: ForwardingPolicy = field(default_factory=ForwardingPolicy)
    identity: SandboxIdentity | None = None
    """Who may connect (None: only the orchestrator's uid; tests, no sandbox)."""
    connections: ConnectionBudget | None = None
    """The run's connection budget, shared by every broker of the run."""
    result: wire_models.ResultRequest | None = None
    rejections: int = 0
    calls: ApprovedCalls = field(default_factory=ApprovedCalls, repr=False)
    allowances: dict[str, Allowance] = field(default_factory=flood_allowances, repr=False)
    model_failures: UpstreamFailures = field(default_factory=lambda: UpstreamFailures())
    """The upstream model errors since the last success, as the host saw them."""
    page_counts: PageCounts = field(default_factory=PageCounts, repr=False)
    """PDF page counts of this subagent's documents (sent again on every turn)."""
    _runner: web.AppRunner | None = field(default=None, repr=False)
    _listener: Listener | None = field(default=None, repr=False)
    _model_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _noticed: set[str] = field(default_factory=set, repr=False)
    _closing: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _host_failed: bool = field(default=False, repr=False)

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / SOCKET_NAME

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        app = web.Application(
            client_max_size=wire.MAX_BODY_BYTES, middlewares=[self._errors_middleware]
        )
        app.router.add_get("/v1/spec", self._spec)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/permission", self._permission)
        app.router.add_post("/v1/events", self._events)
        app.router.add_post("/v1/transcript", self._transcript)
        app.router.add_post("/v1/result", self._result)
        app.router.add_post("/v1/task", self._task)
        app.router.add_get(wire.ALIVE_PATH, self._alive)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        self._listener = Listener(
            path=self.socket_path,
            protocol_factory=server,
            identity=self.identity,
            notice=self.notice,
            run_budget=self.connections,
        )
        await self._listener.start()

    async def close(self) -> None:
        self._closing.set()  # answers the runner's liveness request: the host is done
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def listener(self) -> Listener | None:
        return self._listener

    async def notice(self, kind: str, message: str) -> None:
        """Report a limit: one log line per kind, one event per kind (peer refusals:
        one event each, up to the listener's cap, since each is a different peer)."""
        first = kind not in self._noticed
        self._noticed.add(kind)
        if first:
            log.warning("broker of %s: %s", self.spec.task_id, message)
        elif kind != "peer_refused":
            return
        try:
            await self.host.on_notice(kind, message)
        except WardenError as exc:  # the state disk is full, say: the run reports it
            log.info("recording a broker notice failed: %s", exc)
        except Exception:
            log.exception("recording a broker notice failed")

    # -- plumbing ---------------------------------------------------------

    @web.middleware
    async def _errors_middleware(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        listener, transport = self._listener, request.transport
        if listener is not None:
            listener.request_started(transport)
        try:
            return await self._handle(request, handler)
        finally:
            if listener is not None:
                listener.request_finished(transport)

    async def _handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except RequestRejected as exc:
            return await self._reject(request.path, exc.status, exc.kind, exc.message)
        except web.HTTPRequestEntityTooLarge:
            return await self._reject(
                request.path,
                413,
                "request_too_large",
                f"request body exceeds the broker's limit of {wire.MAX_BODY_BYTES} bytes",
            )
        except web.HTTPException as exc:
            return await self._reject(request.path, exc.status, "invalid_request_error", exc.reason)
        except asyncio.CancelledError:
            raise
        except WardenError as exc:  # the host cannot serve it (e.g. the state disk is full)
            if not self._host_failed:
                self._host_failed = True
                log.info("task %s: %s", self.spec.task_id, exc)
            return web.json_response(
                wire.error_body("api_error", f"the host could not handle this request: {exc}"),
                status=503,
                headers={"x-should-retry": "false"},
            )
        except ConnectionError:  # the container went away mid-request (killed, stopped)
            return web.json_response(
                wire.error_body("api_error", "the connection was lost"), status=400
            )
        except Exception:
            log.exception(
                "broker bug while serving %s for task %s", request.path, self.spec.task_id
            )
            return web.json_response(
                wire.error_body("api_error", "internal broker error; see the host log"), status=500
            )

    async def _reject(self, endpoint: str, status: int, kind: str, message: str) -> web.Response:
        self.rejections += 1
        if self.rejections <= MAX_REJECTIONS_RECORDED:
            try:
                await self.host.on_rejected(endpoint, status, message)
            except WardenError as exc:
                log.info("recording a rejected request failed: %s", exc)
            except Exception:
                log.exception("recording a rejected request failed")
        return web.json_response(wire.error_body(kind, message), status=status)

    # -- endpoints --------------------------------------------------------

    async def _alive(self, request: web.Request) -> web.Response:
        """Answered only when the broker closes. The runner holds this request open:
        an answer, or the connection dropping because this process died, tells it
        the host side is gone and it must stop its tools and exit."""
        await self._closing.wait()
        return web.json_response(wire_models.Ack().model_dump())

    async def _spec(self, request: web.Request) -> web.Response:
        return web.json_response(self.spec.model_dump(mode="json"))

    async def _messages(self, request: web.Request) -> web.Response:
        body, size = await read_sized_json(request)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(messages, list):
            raise RequestRejected(
                400, "invalid_request_error", "a Messages API request needs a 'messages' list"
            )
        if body.get("stream"):
            raise RequestRejected(
                400, "invalid_request_error", "streaming is not supported through the broker"
            )
        # Text a sandbox writes with role `system` is what warden's runner would send
        # there (the skill listing after the first message), or the request is refused.
        listing = self.spec.system_message()
        misplaced = conversation.misplaced_system(messages, listing)
        if misplaced is not None:
            raise RequestRejected(400, "invalid_request_error", f"the broker refuses: {misplaced}")
        # The host decides the model and bounds the response size, not the container.
        body["model"] = self.spec.model
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or not 0 < max_tokens <= self.spec.max_tokens:
            max_tokens = self.spec.max_tokens
            body["max_tokens"] = max_tokens
        try:
            forwarded = check_request(self.forwarding, body, request.headers.get("anthropic-beta"))
        except ForwardingRefused as exc:
            await self._audit_forwarding(exc.decisions)
            raise RequestRejected(400, "invalid_request_error", str(exc)) from None
        await self._audit_forwarding(forwarded.decisions)
        body = forwarded.body
        betas = forwarded.betas
        if listing is not None and conversation.leading_system(messages) is not None:
            # the API takes a system-role message with Claude Code's beta (warden's own)
            betas = [*dict.fromkeys([*betas, conversation.SYSTEM_MESSAGE_BETA])]
        documents = DocumentCost()
        if self.budget.max_total_tokens is not None:  # only a token budget needs pages
            documents = await self.page_counts.cost(body, MAX_OBJECTS_WALKED)
        estimate = estimate_input_tokens(body, size, documents)
        # One model call at a time per subagent, so parallel requests cannot race
        # past the budget.
        async with self._model_lock:
            try:
                admission = self.budget.admit(estimate, max_tokens)
            except BudgetRefused as exc:
                raise RequestRejected(403, "permission_error", str(exc)) from None
            body["max_tokens"] = admission.max_tokens
            # The model SDK is imported in the background (`client`); `upstream`, built
            # on it, is imported only once it is in, so this never blocks the loop.
            await self.upstream.sdk()
            from orchestrator.broker.upstream import forward_messages

            answer = await forward_messages(
                self.upstream,
                body,
                betas,
                request.headers.get("anthropic-version"),
                self.model_failures,
                TextProgress(self._model_text),
            )
            if answer.retries:
                await self._report_retries(answer)
            if answer.status == 200 and isinstance(answer.payload, dict):
                await self._count(answer.payload, admission)
                # The API answered 200, so every message was an object.
                # Stored as the model saw it: prompt-caching breakpoints are billing,
                # not conversation.
                history: list[JSONObject] = [
                    *(uncached(m) for m in messages if isinstance(m, dict)),
                    {"role": "assistant", "content": answer.payload.get("content", [])},
                ]
                await self._store_transcript(history, _assistant_turns(history))
        return web.json_response(answer.payload, status=answer.status, headers=answer.headers)

    async def _model_text(self, text: str) -> None:
        """The model's text as it streams: a progress event (`model_text`)."""
        try:
            await self.host.on_event(
                wire_models.EventRequest(
                    kind="model_text", detail=text[: wire.MAX_EVENT_DETAIL_CHARS]
                )
            )
        except WardenError as exc:  # e.g. the state disk is full: the run reports it
            log.info("recording model text failed: %s", exc)
        except Exception:
            log.exception("recording model text failed")

    async def _report_retries(self, answer: UpstreamAnswer) -> None:
        """A call the SDK retried on the host: one event saying how it went."""
        try:
            await self.host.on_notice("model_retries", describe_retries(answer))
        except WardenError as exc:  # e.g. the state disk is full: the run reports it
            log.info("recording model retries failed: %s", exc)
        except Exception:
            log.exception("recording model retries failed")

    async def _audit_forwarding(self, decisions: list[ForwardDecision]) -> None:
        """Audit forwarding decisions, within the audit's flood allowance (a refused
        request costs no turn, so only this bounds how much it makes the host write)."""
        if not decisions:
            return
        decisions = decisions[:MAX_DECISIONS_AUDITED_PER_REQUEST]
        over = self._over_limit("forwarding audit", sum(len(repr(d)) for d in decisions))
        if over is not None:
            await self.notice("flood/forwarding-audit", over)
            return
        await self.host.on_forwarding(decisions)

    async def _count(self, payload: JSONObject, admission: Admission) -> None:
        self.budget.record(payload.get("usage"), admission)
        try:
            await self.host.on_usage(self.budget)
        except WardenError as exc:  # e.g. the state disk is full: the run reports it
            log.info("recording token usage failed: %s", exc)
        except Exception:
            log.exception("recording token usage failed")

    def _over_limit(self, endpoint: str, nbytes: int) -> str | None:
        return self.allowances[endpoint].take(nbytes)

    async def _flooded(self, endpoint: str, reason: str) -> web.Response:
        """A request over its flood limit: dropped, one notice per endpoint."""
        await self.notice(f"flood{endpoint}", reason)
        return web.json_response(
            wire.error_body("rate_limit_error", f"dropped: {reason}"), status=429
        )

    async def _permission(self, request: web.Request) -> web.Response:
        req = await parse(request, wire_models.PermissionRequest)
        # The runner's progress since its last request comes first: recorded before
        # the decision, so what the host records about this call follows it.
        over_events = await self._record_events(req.events)
        if over_events is not None:
            await self.notice("flood/v1/events", over_events)
        size = len(json.dumps(req.tool_input))
        if size > wire.MAX_TOOL_INPUT_BYTES:
            raise RequestRejected(
                413,
                "request_too_large",
                f"tool input is {size} bytes; the limit is {wire.MAX_TOOL_INPUT_BYTES}",
            )
        over = self._over_limit("/v1/permission", size)
        if over is not None:
            await self.notice("flood/v1/permission", over)
            answer = wire_models.PermissionResponse(behavior="deny", reason=f"not decided: {over}")
            return web.json_response(answer.model_dump(mode="json"))
        servers = [(m.name, m.tools, m.denied) for m in self.spec.mcp_servers]
        if req.tool_name not in self.spec.tools and not wire.mcp_tool_offered(
            req.tool_name, servers
        ):
            answer = wire_models.PermissionResponse(
                behavior="deny",
                reason=(
                    f"tool {req.tool_name!r} is not available to this subagent; "
                    f"its tools are: {', '.join(self.spec.tools)}"
                    + (
                        f" and the MCP tools of {', '.join(n for n, _, _ in servers)}"
                        if servers
                        else ""
                    )
                ),
            )
        else:
            answer = await self.host.answer_tool_call(req)
        if answer.behavior == "allow":
            approved = answer.updated_input if answer.updated_input is not None else req.tool_input
            self.calls.approve(ApprovedCall(req.tool_use_id, req.tool_name, dict(approved)))
        return web.json_response(answer.model_dump(mode="json"))

    async def _events(self, request: web.Request) -> web.Response:
        """One event, or an `EventBatch` (the runner's background sender); each event
        counts against the flood allowance, and a batch is recorded in its order.
        (Progress also rides on permission requests: `_permission`.)"""
        body = await read_json(request)
        if isinstance(body, dict) and "events" in body:
            events = validate(wire_models.EventBatch, body).events
        else:
            events = [validate(wire_models.EventRequest, body)]
        over = await self._record_events(events)
        if over is not None:
            return await self._flooded("/v1/events", over)
        return web.json_response(wire_models.Ack().model_dump())

    async def _record_events(self, events: list[wire_models.EventRequest]) -> str | None:
        """Record events in their order, each within the `/v1/events` flood allowance
        (wherever they came in); None, or why the first refused one and those after it
        were dropped."""
        for event in events:
            over = self._over_limit("/v1/events", len(event.model_dump_json()))
            if over is not None:
                return over
            await self.host.on_event(event)
        return None

    async def _transcript(self, request: web.Request) -> web.Response:
        body, size = await read_sized_json(request)
        over = self._over_limit("/v1/transcript", size)
        if over is not None:
            return await self._flooded("/v1/transcript", over)
        try:
            checkpoint = wire_models.TranscriptCheckpoint.model_validate(body)
        except ValidationError as exc:
            raise RequestRejected(
                400,
                "invalid_request_error",
                f"invalid TranscriptCheckpoint: {exc.error_count()} errors",
            ) from None
        # The turn is the broker's count, not the container's: a forged high turn
        # number must not freeze the stored transcript.
        turn = min(checkpoint.turn, self.budget.turns_used)
        await self._store_transcript(list(checkpoint.messages), turn)
        return web.json_response(wire_models.Ack().model_dump())

    async def _store_transcript(self, messages: list[JSONObject], turn: int) -> None:
        """Store the transcript as data; only calls the gate approved, matched by id,
        go on to what acts on finished calls."""
        await self.host.on_transcript(messages, turn)
        for call, response in list(self.calls.finished_in(messages)):
            await self.host.on_tool_finished(call, response)

    async def _result(self, request: web.Request) -> web.Response:
        result = await parse(request, wire_models.ResultRequest)
        if self.result is not None:
            raise RequestRejected(409, "invalid_request_error", "the result was already posted")
        self.result = result
        await self.host.on_result(result)
        return web.json_response(wire_models.Ack().model_dump())

    async def _task(self, request: web.Request) -> web.Response:
        req = await parse(request, wire_models.DelegateRequest)
        if "Task" not in self.spec.tools:
            answer = wire_models.DelegateResponse(
                text="this subagent may not delegate (nesting is off or its depth cap is reached)",
                is_error=True,
            )
        else:
            answer = await self.host.delegate(req)
        return web.json_response(answer.model_dump(mode="json"))


def uncached(message: JSONObject) -> JSONObject:
    """`message` without `cache_control` keys (what the model saw)."""
    plain = without_cache_control(message)
    return plain if isinstance(plain, dict) else message


def _assistant_turns(messages: list[JSONObject]) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
