"""The page's HTTP server: the static page, a JSON API over the store, a live
stream (server-sent events), and the answers to questions.

Everything is under `/s/SECRET/` and behind `guard.Guard`. A server serves
either one run (`warden run --ui`: that run only; any other run id is unknown
to it) or every run of the state dir (`warden ui`).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import ssl
from collections import OrderedDict
from importlib import resources
from typing import Protocol

from aiohttp import web
from pydantic import ValidationError

from orchestrator.errors import ConfigError, StoreError, TaskNotFoundError
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.store import RunNotFoundError, Store
from orchestrator.web import views
from orchestrator.web.approver import (
    AlreadyAnsweredError,
    AnswerRequest,
    UnknownQuestionError,
)
from orchestrator.web.guard import Guard, ListenConfig, new_secret
from orchestrator.web.live import Changes

log = logging.getLogger(__name__)

POLL_S = 1.0
"""Longest a live stream waits before it looks at the store again (changes made by
other processes, and audit records, which raise no event, are seen this way)."""
COALESCE_S = 0.1
"""A stream sends at most one update per this long, however busy the run."""
KEEPALIVE_S = 15.0
"""A stream with nothing new still writes a comment this often (finds closed tabs)."""
MAX_STREAMS = 16
"""Live streams open at once; more are refused (503)."""
TREES_KEPT = 16
"""Runs whose folded task tree is kept between requests."""
SHUTDOWN_S = 2.0
"""Longest the server waits for open requests (live streams end at once) when it stops."""
MAX_ANSWER_BYTES = 8192
"""Largest answer body accepted."""

STATIC = {
    "": ("index.html", "text/html"),
    "app.js": ("app.js", "text/javascript"),
    "app.css": ("app.css", "text/css"),
}
"""Path under the prefix -> (file in `static/`, content type). Nothing else is served."""


class PageListenError(ConfigError):
    """The page cannot listen where `--ui-listen` says (the port is taken)."""


class Questions(Protocol):
    """Where the open questions of a run are, and where answers go."""

    changes: Changes

    async def state(self, run_id: str) -> JSONObject:
        """`{"open": [question views, oldest first], "answered": [{id, decided_by}]}`
        for `run_id` (`approver.WebApprover.state`)."""
        ...

    async def answer(self, run_id: str, qid: str, request: AnswerRequest) -> str:
        """Settle one question; returns who answered. Raises AlreadyAnsweredError,
        UnknownQuestionError, ValueError."""
        ...

    async def review(self, run_id: str, qid: str) -> JSONObject:
        """An open apply review's diff (`approver.review_json`). Raises
        AlreadyAnsweredError, UnknownQuestionError."""
        ...


class PageServer:
    """One page server. `start()` returns its URL (with the secret): print it once."""

    def __init__(
        self,
        store: Store,
        questions: Questions,
        *,
        listen: ListenConfig | None = None,
        run_id: str | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.store = store
        self.questions = questions
        self.listen = listen or ListenConfig()
        self.listen.check()
        self.only_run = run_id
        self.poll_s = poll_s
        self.guard = Guard(new_secret(), self.listen)
        self.streams = 0
        self._trees: OrderedDict[str, tuple[views.TaskTree, asyncio.Lock]] = OrderedDict()
        self._static = {
            path: (resources.files(__package__).joinpath("static", name).read_bytes(), kind)
            for path, (name, kind) in STATIC.items()
        }
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_ANSWER_BYTES)
        self.guard.install(app)
        p = self.guard.prefix
        for path in STATIC:
            app.router.add_get(p + path, self._file)
        app.router.add_get(p + "api/info", self._info)
        app.router.add_get(p + "api/runs", self._runs)
        app.router.add_get(p + "api/runs/{run}/tree", self._tree)
        app.router.add_get(p + "api/runs/{run}/stream", self._stream)
        app.router.add_get(p + "api/runs/{run}/tasks/{task}/events", self._events)
        app.router.add_get(p + "api/runs/{run}/tasks/{task}/transcript", self._transcript)
        app.router.add_get(p + "api/runs/{run}/audit", self._audit)
        app.router.add_post(p + "api/runs/{run}/questions/{qid}", self._answer)
        app.router.add_get(p + "api/runs/{run}/questions/{qid}/review", self._review)
        return app

    async def start(self) -> str:
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_S
        )
        await self._runner.setup()
        context = None
        if self.listen.tls_cert is not None and self.listen.tls_key is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.listen.tls_cert, self.listen.tls_key)
        site = web.TCPSite(self._runner, self.listen.host, self.listen.port, ssl_context=context)
        try:
            await site.start()
        except OSError as exc:  # the port is taken (another page), or the host is not ours
            await self.close()
            raise PageListenError(
                f"the page cannot listen on {self.listen.host}:{self.listen.port} "
                f"({exc.strerror or exc}); another process (another `warden ui`, or a "
                "`warden run --ui`) may have that port: pick another with --ui-listen, "
                "or port 0 for a free one"
            ) from exc
        server = site._server  # aiohttp keeps the asyncio server here
        assert isinstance(server, asyncio.Server)
        port = int(server.sockets[0].getsockname()[1])
        self.guard.bind(port)
        host = f"[{self.listen.host}]" if ":" in self.listen.host else self.listen.host
        self.url = f"{self.listen.scheme}://{host}:{port}{self.guard.prefix}"
        return self.url

    async def close(self) -> None:
        self._closing = True
        self.questions.changes.bump()  # wakes every live stream, which then ends
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> PageServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- handlers ---------------------------------------------------------------------

    async def _file(self, request: web.Request) -> web.Response:
        body, kind = self._static[request.path.removeprefix(self.guard.prefix)]
        return web.Response(body=body, content_type=kind, charset="utf-8")

    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response({"user": _user(), "run": self.only_run})

    async def _runs(self, request: web.Request) -> web.Response:
        return web.json_response(await self._read(_runs, self.only_run))

    async def _tree(self, request: web.Request) -> web.Response:
        return web.json_response(await self._snapshot(self._run(request)))

    async def _events(self, request: web.Request) -> web.Response:
        run_id, task_id = self._run(request), request.match_info["task"]
        return web.json_response(await self._read(views.task_events, run_id, task_id))

    async def _transcript(self, request: web.Request) -> web.Response:
        run_id, task_id = self._run(request), request.match_info["task"]
        return web.json_response(await self._read(views.transcript, run_id, task_id))

    async def _audit(self, request: web.Request) -> web.Response:
        filters = {k: request.query[k] for k in views.AUDIT_FILTERS if k in request.query}
        return web.json_response(await self._read(views.audit, self._run(request), filters))

    async def _answer(self, request: web.Request) -> web.Response:
        run_id, qid = self._run(request), request.match_info["qid"]
        if request.content_type != "application/json":
            return _error(415, "send the answer as application/json")
        try:
            answer = AnswerRequest.model_validate_json(await request.read())
            who = await self.questions.answer(run_id, qid, answer)
        except ValidationError as exc:
            return _error(400, f"not an answer: {exc.errors()[0]['msg']}")
        except AlreadyAnsweredError as exc:
            return web.json_response({"answered_by": exc.decided_by}, status=409)
        except UnknownQuestionError:
            return _error(404, "no such question")
        except ValueError as exc:
            return _error(400, str(exc))
        self.questions.changes.bump()
        return web.json_response({"answered_by": who})

    async def _review(self, request: web.Request) -> web.Response:
        run_id, qid = self._run(request), request.match_info["qid"]
        try:
            return web.json_response(await self.questions.review(run_id, qid))
        except AlreadyAnsweredError as exc:
            return web.json_response({"answered_by": exc.decided_by}, status=409)
        except UnknownQuestionError:
            return _error(404, "no such apply review")

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        run_id = self._run(request)
        await self._snapshot(run_id)  # an unknown run is a 404, not an empty stream
        if self.streams >= MAX_STREAMS:
            return _error(503, f"more than {MAX_STREAMS} live pages are open; close one")
        self.streams += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await response.prepare(request)
            seen, quiet = -1, 0.0
            last = b""
            while not self._closing:
                seen = await self.questions.changes.wait(seen, self.poll_s)
                if self._closing:
                    break
                body = json.dumps(await self._snapshot(run_id)).encode()
                if body != last:
                    await response.write(b"event: update\ndata: " + body + b"\n\n")
                    last, quiet = body, 0.0
                else:
                    quiet += self.poll_s
                    if quiet >= KEEPALIVE_S:
                        await response.write(b": keepalive\n\n")
                        quiet = 0.0
                await asyncio.sleep(COALESCE_S)
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the page was closed (or the server is stopping)
        finally:
            self.streams -= 1
        return response

    # ---- helpers ----------------------------------------------------------------------

    def _run(self, request: web.Request) -> str:
        run_id = request.match_info["run"]
        if self.only_run is not None and run_id != self.only_run:
            raise web.HTTPNotFound()
        return run_id

    async def _snapshot(self, run_id: str) -> JSONObject:
        tree, lock = self._tree_for(run_id)
        async with lock:
            snap = await self._read(tree.refresh)
        questions = await self.questions.state(run_id)
        snap["questions"] = questions.get("open", [])
        snap["answered"] = questions.get("answered", [])
        return snap

    def _tree_for(self, run_id: str) -> tuple[views.TaskTree, asyncio.Lock]:
        entry = self._trees.pop(run_id, None) or (views.TaskTree(run_id), asyncio.Lock())
        self._trees[run_id] = entry
        while len(self._trees) > TREES_KEPT:
            self._trees.popitem(last=False)
        return entry

    async def _read(self, fn: object, *args: object) -> JSONObject:
        """`fn(store, *args)` in a worker thread; an unknown run or task is a 404."""
        assert callable(fn)
        try:
            result: JSONObject = await asyncio.to_thread(fn, self.store, *args)
        except (RunNotFoundError, TaskNotFoundError):
            raise web.HTTPNotFound() from None
        except StoreError as exc:
            log.warning("the page could not read the store: %s", exc)
            raise web.HTTPServiceUnavailable() from None
        return result


def _runs(store: Store, only: str | None) -> JSONObject:
    return {"runs": list[JSONValue](views.runs(store, only))}


def _user() -> str:
    with contextlib.suppress(Exception):
        return getpass.getuser()
    return "user"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
