"""One MCP server as the runner speaks to it: JSON-RPC 2.0 over a stdio child.

The server's command is workspace content (an agent file, `.mcp.json`): it runs here,
inside the subagent's sandbox, started the way a Bash command is (the image's
environment, `/workspace` as its working directory, its own session and process
group), so it is held by the same walls: no network but the sandbox's egress proxy,
the same mounts, cgroup limits and seccomp filter. Nothing of it runs on the host.

`StdioServer` starts the child and keeps one reader thread on its stdout: each line
is one JSON-RPC message; an answer wakes the request waiting for its id, a request
from the server is answered (`ping`) or refused (everything else: this client offers
no sampling, roots or elicitation), a notification is dropped. A line over
`MAX_MESSAGE_BYTES`, a child that exits, or a request not answered in time is a
`McpServerError` naming the server, and the server is stopped: its tools then answer
with that error, and the subagent goes on. What the server writes to stderr is kept
(the last `STDERR_KEPT_BYTES`) to say why it failed.

Standard library only, like the rest of the runner.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from sandbox_tools import oom, wire, wire_answers
from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject, JSONValue

PROTOCOL_VERSION = "2025-06-18"
"""The MCP revision this client asks for (a server may answer with an older one)."""
CLIENT_INFO: JSONObject = {"name": "warden", "version": "1"}

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Longest JSON-RPC line read from a server; a longer one stops it."""
STDERR_KEPT_BYTES = 4000
"""The newest bytes of a server's stderr kept, to say why it failed."""
READ_CHUNK = 64 * 1024
CLOSE_WAIT_S = 5.0
"""How long `close` waits for a killed server to be reaped."""
STDERR_DRAIN_S = 1.0
"""After a server exits, how long its stderr may take to be read to the end."""

_running_groups: set[int] = set()
"""Process groups of the servers this runner started, for `kill_running`."""


class McpServerError(ToolError):
    """A server did not start, did not answer in time, broke the protocol, or exited."""


def kill_running() -> None:
    """SIGKILL every MCP server this runner started (the host is gone)."""
    for pgid in list(_running_groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class _Tail:
    """The newest `limit` bytes written to a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        return " ".join(self.data.decode("utf-8", errors="replace").split())[-800:]


class McpRefusedError(ToolError):
    """The server answered a request with a JSON-RPC error (its `code` kept)."""

    def __init__(self, message: str, code: object) -> None:
        super().__init__(message)
        self.code = code


class McpSession:
    """What both transports offer: one request, one notification, stop and close."""

    name: str
    failure: str | None = None
    has_resources: bool = False
    """Whether its `initialize` answer declares the `resources` capability."""

    def request(self, method: str, params: JSONObject, timeout_s: float) -> JSONObject:
        raise NotImplementedError

    def notify(self, method: str, params: JSONObject | None = None) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """End the session (kill a stdio server); idempotent."""

    def close(self) -> None:
        self.stop()

    def initialize(self, timeout_s: float) -> list[JSONObject]:
        """`initialize`, `notifications/initialized`, then every page of `tools/list`,
        all within `timeout_s`; the tools as the server lists them."""
        deadline = time.monotonic() + timeout_s
        started = self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO,
        }, timeout_s)  # fmt: skip
        capabilities = started.get("capabilities")
        self.has_resources = isinstance(capabilities, dict) and isinstance(
            capabilities.get("resources"), dict
        )
        self.notify("notifications/initialized")
        tools: list[JSONObject] = []
        cursor: JSONValue = None
        while True:
            params: JSONObject = {} if cursor is None else {"cursor": cursor}
            left = max(0.0, deadline - time.monotonic())
            page = self.request("tools/list", params, left)
            listed = page.get("tools")
            if isinstance(listed, list):
                tools.extend(t for t in listed if isinstance(t, dict))
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor or len(tools) > wire.MAX_MCP_TOOLS:
                return tools


def answer_result(name: str, method: str, answer: JSONObject) -> JSONObject:
    """The result of a JSON-RPC answer; a ToolError for an error answer."""
    error = answer.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        code = error.get("code") if isinstance(error, dict) else None
        raise McpRefusedError(f"MCP server {name!r} refused {method}: {str(message)[:2000]}", code)
    result = answer.get("result")
    if not isinstance(result, dict):
        raise ToolError(f"MCP server {name!r} answered {method} without a result object")
    return result


class StdioServer(McpSession):
    """One stdio MCP server, started inside this sandbox."""

    def __init__(self, server: wire_answers.McpServer, root: Path) -> None:
        self.name = server.name
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._answers: dict[int, JSONObject] = {}
        self._pending: set[int] = set()
        """Ids of requests waiting: an answer to any other id is dropped (a server
        cannot grow the runner's memory with answers nobody asked for)."""
        self._next_id = 0
        self._stderr = _Tail(STDERR_KEPT_BYTES)
        self.failure: str | None = None
        """Why the server is unusable (None while it runs)."""
        env = {**os.environ, **oom.EXPENDABLE_ENV, **dict(server.env)}
        env["CLAUDE_PROJECT_DIR"] = str(root)
        program = shutil.which(server.command, path=env.get("PATH"))
        if program is None:
            raise McpServerError(
                f"MCP server {self.name!r} did not start: {server.command!r} is not a program "
                "on the sandbox's PATH (it runs inside the sandbox, so the command must exist "
                "in the subagent's image)"
            )
        try:
            # Through bash, which sources `oom.EXPENDABLE_ENV`'s script first: the
            # server is the kernel's first choice when the sandbox runs out of memory,
            # not the runner that reports it.
            self._proc = subprocess.Popen(
                ["bash", "-c", 'exec "$@"', f"mcp-{self.name}", program, *server.args],
                cwd=root,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            raise McpServerError(
                f"MCP server {self.name!r} did not start: {server.command!r}: "
                f"{e.strerror or e} (it runs inside the sandbox, so the command must exist "
                "in the subagent's image)"
            ) from None
        _running_groups.add(self._proc.pid)
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()
        self._stdout_reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._stdout_reader.start()

    # -- the child's streams ------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        pending = bytearray()
        while True:
            try:
                chunk = os.read(self._proc.stdout.fileno(), READ_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                line = bytes(pending[:end])
                del pending[: end + 1]
                self._on_line(line)
            if len(pending) > MAX_MESSAGE_BYTES:
                self._fail(f"it sent a message longer than {MAX_MESSAGE_BYTES} bytes")
                pending.clear()  # read on (and drop) until the killed server's pipe closes
        self._proc.stdout.close()
        code = self._proc.wait()
        self._stderr_reader.join(STDERR_DRAIN_S)  # its last words say why
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        self._fail(f"it exited ({how})")

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        while True:
            try:
                chunk = os.read(self._proc.stderr.fileno(), READ_CHUNK)
            except OSError:
                return
            if not chunk:
                self._proc.stderr.close()
                return
            with self._lock:
                self._stderr.add(chunk)

    def _on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            return  # not JSON-RPC (a stray print); MCP forbids it, a client may skip it
        if not isinstance(message, dict):
            return
        ident = message.get("id")
        if "method" in message:
            if ident is not None:  # a request from the server
                if message.get("method") == "ping":
                    self._send({"jsonrpc": "2.0", "id": ident, "result": {}})
                else:
                    self._send({"jsonrpc": "2.0", "id": ident, "error": {
                        "code": -32601, "message": "warden's client offers no such method"}})  # fmt: skip
            return
        if isinstance(ident, int) and not isinstance(ident, bool):
            with self._answered:
                if ident in self._pending:
                    self._answers[ident] = message
                    self._answered.notify_all()

    def _send(self, message: JSONObject) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError):
            pass  # it exited: the stdout reader says so

    def _fail(self, why: str) -> None:
        with self._answered:
            if self.failure is None:
                self.failure = why
            self._answered.notify_all()
        self.stop()

    def describe_failure(self) -> str:
        with self._lock:
            tail = self._stderr.text()
        said = f"; its stderr ends: {tail}" if tail else ""
        return f"MCP server {self.name!r}: {self.failure}{said}"

    # -- JSON-RPC -----------------------------------------------------------------
    def request(self, method: str, params: JSONObject, timeout_s: float) -> JSONObject:
        """The result of one request; McpServerError when it fails or is not answered."""
        with self._answered:
            if self.failure is not None:
                raise McpServerError(self.describe_failure_locked())
            self._next_id += 1
            ident = self._next_id
            self._pending.add(ident)
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        with self._answered:
            while ident not in self._answers and self.failure is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._answered.wait(left)
            answer = self._answers.pop(ident, None)
            self._pending.discard(ident)
        if answer is None:
            if self.failure is None:
                self._fail(f"it did not answer {method} within {timeout_s:g} s, so it was stopped")
            raise McpServerError(self.describe_failure())
        return answer_result(self.name, method, answer)

    def describe_failure_locked(self) -> str:
        tail = self._stderr.text()
        said = f"; its stderr ends: {tail}" if tail else ""
        return f"MCP server {self.name!r}: {self.failure}{said}"

    def notify(self, method: str, params: JSONObject | None = None) -> None:
        message: JSONObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def stop(self) -> None:
        """SIGKILL the server and everything it started (its process group)."""
        if self._proc.pid in _running_groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            _running_groups.discard(self._proc.pid)
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()

    def close(self) -> None:
        """Stop it and wait (briefly) until its pipes are closed and it is reaped."""
        self.stop()
        if threading.current_thread() is not self._stdout_reader:
            self._stdout_reader.join(CLOSE_WAIT_S)
