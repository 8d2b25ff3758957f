"""The MCP server: the SDK's low-level `Server` with warden's tools and the agent
listing, each session served by its own run (`runs`), task events relayed to the
client as progress notifications and log messages; over stdio or over streamable
HTTP on 127.0.0.1, where every request must carry the server's secret (a bearer
token) and a Host (and, when sent, an Origin) naming this server."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import signal
import socket
import warnings
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning

from orchestrator import __version__
from orchestrator.errors import ConfigError, WardenError
from orchestrator.mcp_server.front import INSTRUCTIONS, SERVER_NAME, StdioFront
from orchestrator.mcp_server.runs import SessionRun, SessionRuns
from orchestrator.mcp_server.tools import AGENTS_URI, agents_text, call_tool, result, tool_list
from orchestrator.results.models import TASK_END_KINDS, Event
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession
    from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

HTTP_PATH = "/mcp"
SLOT_KEY = "warden.run"
"""Where a connection's `SessionRun` is kept (`Connection.state`)."""
LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency",
)  # fmt: skip
WARNING_KINDS = frozenset({"task_failed", "task_timed_out", "permission_denied", "task_refused"})
MAX_EVENT_TEXT_CHARS = 300
"""Of one event's data, what a progress or log message shows."""


def build_server(runs: SessionRuns) -> Server[Any]:
    """The low-level server whose handlers answer from each session's run."""

    async def slot(ctx: ServerRequestContext[Any, Any]) -> SessionRun:
        connection = _connection(ctx.session)
        found = connection.state.get(SLOT_KEY)
        if found is None:
            found = runs.claim()
            connection.state[SLOT_KEY] = found
            # However the session ends (disconnect, DELETE, idle), its run ends too.
            connection.exit_stack.callback(found.end)
        assert isinstance(found, SessionRun)
        return found

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            run = await (await slot(ctx)).run(ctx.session)
        except WardenError:  # the tools still list; a Task call says what went wrong
            return types.ListToolsResult(tools=tool_list([]))
        return types.ListToolsResult(tools=tool_list(run.agent_types()))

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name="agents",
                    uri=AGENTS_URI,
                    description="The subagent types the Task tool may name, one a line.",
                    mime_type="text/plain",
                )
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if str(params.uri) != AGENTS_URI:
            raise ValueError(f"no resource {params.uri}; warden serves {AGENTS_URI}")
        run = await (await slot(ctx)).run(ctx.session)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=AGENTS_URI, mime_type="text/plain", text=agents_text(run.agent_types())
                )
            ]
        )

    async def set_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        _connection(ctx.session).state["warden.level"] = params.level
        return types.EmptyResult()

    async def call(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        session_run = await slot(ctx)
        try:
            run = await session_run.run(ctx.session)
        except WardenError as exc:
            return result(f"warden could not open its run: {exc}", error=True)
        request_id = ctx.request_id if ctx.request_id is not None else "?"
        level = _connection(ctx.session).state.get("warden.level", "info")
        relay = EventRelay(ctx.session, request_id, level)
        arguments = params.arguments or {}
        if params.name == "TaskOutput" and isinstance(arguments.get("task_id"), str):
            relay.follow(arguments["task_id"])
        session_run.channel.call_started(request_id, ctx.session)
        unsubscribe = run.subscribe(relay.on_event)
        try:
            return await call_tool(
                run, params.name, arguments, call_id=f"mcp_{request_id}", on_start=relay.follow
            )
        finally:
            unsubscribe()
            session_run.channel.call_ended(request_id)
            await relay.close()

    with warnings.catch_warnings():
        # Log messages are the handshake era's; the SDK marks their handler deprecated
        # for the 2026 protocol, where clients opt in per request instead.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(
            SERVER_NAME,
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call,
            on_list_resources=list_resources,
            on_read_resource=read_resource,
            on_set_logging_level=set_level,
        )


def _connection(session: ServerSession) -> Any:
    """The SDK's per-connection object (its `state` and `exit_stack` are public; the
    session that handlers get keeps it as `_connection`)."""
    return session._connection


class EventRelay:
    """Relays the events of the tasks one tool call follows (and every subagent they
    start) to the client: a progress notification each (when the call asked for
    progress) and a log message each (at the client's level), in order, never
    blocking the run.

    The end of a task the call itself follows is a log message only, never progress:
    it comes right before the call's result, and Claude Code (2.1.197, its MCP SDK
    handles notifications a tick after responses) took a progress notification that
    arrived with the result as one for an unknown token and dropped the connection."""

    def __init__(self, session: ServerSession, request_id: types.RequestId, level: str) -> None:
        self.session = session
        self.request_id = request_id
        self.min_level = LEVELS.index(level) if level in LEVELS else 1
        self.followed: set[str] = set()
        self.own: set[str] = set()
        """The tasks the call follows itself (whose end is the call's result)."""
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self.sender = asyncio.create_task(self._send(), name="warden-mcp-events")
        self.count = 0

    def follow(self, task_id: str) -> None:
        self.followed.add(task_id)
        self.own.add(task_id)

    def on_event(self, event: Event) -> None:
        if event.task_id is None:
            return
        if event.parent_id in self.followed:
            self.followed.add(event.task_id)
        if event.task_id in self.followed:
            self.queue.put_nowait(event)

    async def close(self) -> None:
        self.queue.put_nowait(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.sender), 5)
        self.sender.cancel()

    async def _send(self) -> None:
        while (event := await self.queue.get()) is not None:
            self.count += 1
            text = describe(event)
            level: types.LoggingLevel = "warning" if event.kind in WARNING_KINDS else "info"
            try:
                if not (event.kind in TASK_END_KINDS and event.task_id in self.own):
                    await self.session.report_progress(self.count, None, text)
                if LEVELS.index(level) >= self.min_level and event.kind != "model_text":
                    await self.session.send_notification(
                        types.LoggingMessageNotification(
                            params=types.LoggingMessageNotificationParams(
                                level=level,
                                logger="warden",
                                data={"kind": event.kind, "task_id": event.task_id, "text": text},
                            )
                        ),
                        related_request_id=self.request_id,
                    )
            except Exception as exc:  # the client went away: the run goes on without it
                log.debug("could not relay %s: %s", event.kind, exc)


def describe(event: Event) -> str:
    """One line for an event: who, what, and its data (container text made inert)."""
    data: Any = event.data
    if event.kind == "task_running" and isinstance(data.get("event"), dict):
        data = data["event"]
    shown = printable(json.dumps(data, ensure_ascii=False, sort_keys=True), MAX_EVENT_TEXT_CHARS)
    who = f"{event.task_id} ({event.agent_type})" if event.agent_type else str(event.task_id)
    return f"{who} {event.kind}: {shown}"


# -- transports ------------------------------------------------------------


async def serve_stdio(runs: SessionRuns, front: StdioFront) -> None:
    """Serve one session over the front's stdio wire (which answered the client until
    now) until the client closes it; the run ends with it (or with a stop signal, as
    Ctrl-C ends a run). A client that goes away mid-call ends the session as a close
    would: quietly."""
    from mcp.server.stdio import stdio_server

    server = build_server(runs)
    stopping = True
    front.handover()
    try:
        async with stdio_server(stdin=front.lines(), stdout=front.writer()) as (  # type: ignore[arg-type]  # duck-typed AsyncFile
            read_stream,
            write_stream,
        ):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        stopping = False
    finally:
        await to_its_end(runs.close(stopping=stopping))


async def to_its_end(closing: Coroutine[Any, Any, None]) -> None:
    """Await `closing` to its end, even when this task is cancelled meanwhile (a stop
    signal while the session is already ending: Claude Code's SIGINT after the client
    closed, say); the cancellation is raised once it has ended. Otherwise the
    cancellation would end `asyncio.run`, which cancels whatever still runs: the
    run's end, cut short (tasks not stopped, result document not written). Bounded
    by the stop's grace timer (`lifecycle.interrupts`)."""
    ending = asyncio.ensure_future(closing)
    cancelled = False
    while not ending.done():
        try:
            await asyncio.shield(ending)
        except asyncio.CancelledError:
            if ending.cancelled():
                raise
            cancelled = True
    ending.result()
    if cancelled:
        raise asyncio.CancelledError


class RequireSecret:
    """ASGI middleware: an HTTP request without `Authorization: Bearer SECRET` is
    refused (401) before the MCP layer sees it, compared in constant time."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app = app
        self.expected = b"Bearer " + secret.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps(
                    {
                        "error": "warden mcp needs its secret: send 'Authorization: Bearer "
                        "TOKEN' with the token `warden mcp --http` was started with "
                        "(WARDEN_MCP_TOKEN)"
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="warden"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(runs: SessionRuns, secret: str, port: int, idle_timeout_s: float) -> ASGIApp:
    """The streamable HTTP app: the SDK's session manager behind the secret, with its
    DNS-rebinding protection naming exactly this server's host and port."""
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    server = build_server(runs)
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}"],
            allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}"],
        ),
        session_idle_timeout=idle_timeout_s,
    )
    app = Starlette(
        routes=[Route(HTTP_PATH, endpoint=StreamableHTTPASGIApp(manager))],
        lifespan=lambda _app: manager.run(),
    )
    return RequireSecret(app, secret)


class McpListenError(ConfigError):
    """`--port` names a port warden cannot listen on (another process holds it)."""


def listen(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (port 0: any free one). Raises
    McpListenError when the port is taken (two `warden mcp --http` on the default)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise McpListenError(
            f"cannot serve MCP on 127.0.0.1:{port} ({exc.strerror or exc}); another "
            "process (another `warden mcp --http`?) may have that port: pick another "
            "with --port, or --port 0 for a free one (its address is printed)"
        ) from exc
    sock.setblocking(False)
    return sock


async def serve_http(
    runs: SessionRuns, sock: socket.socket, secret: str, idle_timeout_s: float
) -> int:
    """Serve sessions over streamable HTTP until SIGINT/SIGTERM/SIGHUP; then every
    session's run ends as Ctrl-C ends a run. Returns the exit status."""
    import uvicorn

    port = sock.getsockname()[1]
    config = uvicorn.Config(
        http_app(runs, secret, port, idle_timeout_s),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = _quiet_uvicorn(config)
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        server.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await server.serve(sockets=[sock])
    finally:
        await asyncio.shield(runs.close(stopping=True))
    return 128 + received[0] if received else 0


def _quiet_uvicorn(config: Any) -> Any:
    """uvicorn's server without its own signal handling: warden's handlers stop it, so
    every run has ended before the process exits."""
    import uvicorn

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Quiet(config)
