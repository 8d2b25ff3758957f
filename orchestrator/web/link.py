"""How `warden ui` (another process) reaches a live run's questions.

A run with a page also listens on a Unix socket in a fresh private directory
(0700, the socket 0600) and names that socket in its run directory
(`runs/RUN/ui-link`, 0600). Only this user can connect, and the server checks
the connecting process's uid (`SO_PEERCRED`) as well. No secret is written to
disk, and a browser cannot reach a Unix socket, so there is no Host or Origin to
check. Over it a second process reads the run's open questions and answers one;
the answer is settled by the run's own approver, exactly as from its page.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import tempfile
from pathlib import Path
from urllib.parse import quote

import aiohttp
from aiohttp import web
from pydantic import ValidationError

from orchestrator.jsontypes import JSONObject
from orchestrator.web.approver import (
    AlreadyAnsweredError,
    AnswerRequest,
    LocalQuestions,
    UnknownQuestionError,
    WebApprover,
)
from orchestrator.web.guard import Handler
from orchestrator.web.live import Changes
from orchestrator.web.server import SHUTDOWN_S

LINK_FILE = "ui-link"
"""In the run's directory of the state dir: the path of its question socket."""
LINK_TIMEOUT_S = 3.0
"""Longest `warden ui` waits for a live run to answer over its socket."""
RUN_ID = re.compile(r"run_[A-Za-z0-9_]{1,120}")
"""What a run id looks like; anything else is never turned into a path."""


def link_file(state_dir: Path, run_id: str) -> Path | None:
    if not RUN_ID.fullmatch(run_id):
        return None
    return state_dir / "runs" / run_id / LINK_FILE


class RunLink:
    """The live run's side: serves its approver's questions on a private socket."""

    def __init__(self, approver: WebApprover, state_dir: Path, run_id: str) -> None:
        self.questions = LocalQuestions(approver)
        self.run_id = run_id
        self.pointer = link_file(state_dir, run_id)
        self._dir: Path | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self.pointer is None:
            return
        app = web.Application(middlewares=[_same_user])
        app.router.add_get("/v1/state", self._state)
        app.router.add_post("/v1/questions/{qid}", self._answer)
        app.router.add_get("/v1/questions/{qid}/review", self._review)
        self._dir = Path(tempfile.mkdtemp(prefix="warden-ui-"))
        path = self._dir / "run.sock"
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_S
        )
        await self._runner.setup()
        await web.UnixSite(self._runner, str(path)).start()
        path.chmod(0o600)
        fd = os.open(self.pointer, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(str(path))

    async def close(self) -> None:
        if self.pointer is not None:
            self.pointer.unlink(missing_ok=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    async def _state(self, request: web.Request) -> web.Response:
        return web.json_response(await self.questions.state(self.run_id))

    async def _review(self, request: web.Request) -> web.Response:
        try:
            view = await self.questions.review(self.run_id, request.match_info["qid"])
        except AlreadyAnsweredError as exc:
            return web.json_response({"answered_by": exc.decided_by}, status=409)
        except UnknownQuestionError:
            return web.json_response({"error": "no such apply review"}, status=404)
        return web.json_response(view)

    async def _answer(self, request: web.Request) -> web.Response:
        try:
            answer = AnswerRequest.model_validate_json(await request.read())
            who = await self.questions.answer(self.run_id, request.match_info["qid"], answer)
        except ValidationError as exc:
            return web.json_response({"error": exc.errors()[0]["msg"]}, status=400)
        except AlreadyAnsweredError as exc:
            return web.json_response({"answered_by": exc.decided_by}, status=409)
        except UnknownQuestionError:
            return web.json_response({"error": "no such question"}, status=404)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"answered_by": who})


@web.middleware
async def _same_user(request: web.Request, handler: Handler) -> web.StreamResponse:
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None:
        return web.Response(status=403)
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    if uid != os.getuid():
        return web.Response(status=403)
    return await handler(request)


class RemoteQuestions:
    """`warden ui`'s side: the questions of live runs, through their sockets
    (`server.Questions`). A run without a link (finished, or started without
    `--ui`) has none."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.changes = Changes()

    def _socket(self, run_id: str) -> Path | None:
        pointer = link_file(self.state_dir, run_id)
        if pointer is None:
            return None
        try:
            path = Path(pointer.read_text().strip())
            owner = path.stat().st_uid
        except OSError:
            return None
        return path if owner == os.getuid() else None

    async def _call(
        self, run_id: str, method: str, path: str, body: bytes = b""
    ) -> tuple[int, JSONObject]:
        sock = self._socket(run_id)
        if sock is None:
            return 404, {
                "error": "the run has no live page (it ended, or was started without --ui)"
            }
        timeout = aiohttp.ClientTimeout(total=LINK_TIMEOUT_S)
        try:
            async with (
                aiohttp.ClientSession(
                    connector=aiohttp.UnixConnector(path=str(sock)), timeout=timeout
                ) as session,
                session.request(
                    method, "http://run" + path, data=body,
                    headers={"Content-Type": "application/json"},
                ) as response,
            ):  # fmt: skip
                data: JSONObject = await response.json()
                return response.status, data
        except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
            return 503, {"error": "the run did not answer over its socket"}

    async def state(self, run_id: str) -> JSONObject:
        status, data = await self._call(run_id, "GET", "/v1/state")
        return data if status == 200 else {"open": [], "answered": []}

    async def review(self, run_id: str, qid: str) -> JSONObject:
        status, data = await self._call(
            run_id, "GET", f"/v1/questions/{quote(qid, safe='')}/review"
        )
        if status == 200:
            return data
        if status == 409:
            raise AlreadyAnsweredError(str(data.get("answered_by")))
        raise UnknownQuestionError(str(data.get("error")))

    async def answer(self, run_id: str, qid: str, request: AnswerRequest) -> str:
        status, data = await self._call(
            run_id,
            "POST",
            f"/v1/questions/{quote(qid, safe='')}",
            request.model_dump_json().encode(),
        )
        if status == 200:
            return str(data.get("answered_by"))
        if status == 409:
            raise AlreadyAnsweredError(str(data.get("answered_by")))
        if status == 404:
            raise UnknownQuestionError(str(data.get("error")))
        raise ValueError(str(data.get("error", f"the run refused the answer ({status})")))
