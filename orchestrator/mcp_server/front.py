"""The stdio front of `warden mcp`: it answers a client's `initialize`, `ping` and
`tools/list` at once, from the standard library alone, while the MCP SDK, the engine
client and the rest of the run load (about a second of CPU; on a loaded machine more
than an MCP client such as Claude Code waits for a server). Once the SDK server is
ready the front hands the stream over: the SDK is given the client's `initialize` and
`notifications/initialized` again (so its session state is the client's), its second
answer to `initialize` is dropped, and every other message goes to it in order.

The front also owns the wire for the whole session: standard input and output are
moved to private descriptors (fd 0 reads /dev/null and fd 1 writes to stderr, so
stray output cannot corrupt the stream), and a client that goes away (end of input,
or a broken pipe on output) ends the session quietly instead of raising.

What the front answers must equal what the SDK server would: `SERVER_NAME`,
`INSTRUCTIONS`, `CAPABILITIES` and `HANDSHAKE_VERSIONS` are checked against the SDK by
tests/unit/mcp_server/test_front.py.

`warden mcp` on stdio starts its front before anything else loads, click included
(`orchestrator.launch`): this module imports the standard library's smallest parts
only, and asyncio when the hand-over needs it."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from orchestrator import __version__

if TYPE_CHECKING:
    import asyncio

SERVER_NAME = "warden"
INSTRUCTIONS = (
    "warden runs each subagent in its own locked-down container. Delegate work with the "
    "Task tool; read the agent types in its description (or the warden://agents resource)."
)
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The protocol versions the SDK negotiates through `initialize` (a client asking for
another gets the newest of these, as from the SDK)."""
CAPABILITIES: dict[str, Any] = {
    "logging": {},
    "resources": {"subscribe": False, "listChanged": False},
    "tools": {"listChanged": False},
}
"""What `server.build_server`'s handlers make the SDK announce."""
MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest message the front reads (a client's Task prompt is far smaller)."""


class StdioFront:
    """The session's stdio wire; `start()` begins answering, `handover()` gives the
    stream to the SDK server (`lines()` and `writer()` are its stdin and stdout)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._input = os.fdopen(read_fd, "rb", closefd=False)
        self._write_fd = write_fd
        self._state = threading.Lock()
        self._write = threading.Lock()
        self._listing: list[dict[str, Any]] | None = None
        self._listing_known = threading.Event()
        self._replay: list[bytes] = []
        self._pending: list[bytes | None] = []
        self._queue: asyncio.Queue[bytes | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drop_id: object = None
        self.client_gone = False
        self._first_ended = False
        self._broken = False
        """The client closed its end (input ended, or output broke)."""
        self._reader = threading.Thread(target=self._read, name="warden-mcp-front", daemon=True)

    @classmethod
    def on_stdio(cls) -> StdioFront:
        """A front on this process's stdin/stdout, which it takes over: fd 0 then reads
        /dev/null and fd 1 writes to stderr."""
        read_fd = os.dup(0)
        write_fd = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        return cls(read_fd, write_fd)

    def answer_first(self) -> None:
        """Read the client's first message and answer it here, in the calling thread,
        before the reader starts (`warden mcp` does this before it forks, so the
        answer to `initialize` does not wait for the new process to be scheduled)."""
        self._first_ended = not self._take(self._next_line())

    def start(self) -> StdioFront:
        if self._first_ended:  # the input ended with the first message: nothing to read
            return self
        self._reader.start()
        return self

    def wire_fds(self) -> tuple[int, int]:
        """The descriptors of the client's input and output the front holds."""
        return self._input.fileno(), self._write_fd

    def set_listing(self, tools: list[dict[str, Any]] | None) -> None:
        """The `tools/list` answer (MCP wire form); None: the SDK server answers it."""
        self._listing = tools
        self._listing_known.set()

    # -- before the hand-over ----------------------------------------------------

    def _read(self) -> None:
        while self._take(self._next_line()):
            pass

    def _next_line(self) -> bytes:
        try:
            return self._input.readline(MAX_LINE_BYTES)
        except (OSError, ValueError):
            return b""

    def _take(self, line: bytes) -> bool:
        """Answer or pass on one line read from the client; False: its input ended."""
        if not line:
            self.client_gone = True
            self._forward(None)
            return False
        if line.strip() and not self._answered(line):
            self._forward(line)
        return True

    def _answered(self, line: bytes) -> bool:
        """Answer `line` here if the SDK is not serving yet and nothing is queued for it
        (so the SDK sees everything else in order). True: answered or kept for replay."""
        with self._state:
            if self._queue is not None or self._pending:
                return False
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return False
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params")
        if method == "notifications/initialized" and self._replay:
            self._replay.append(line)
            return True
        if request_id is None or isinstance(request_id, bool):
            return False
        if method == "initialize" and not self._replay:
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            self._replay.append(line)
            self._drop_id = request_id
            self._reply(request_id, initialize_result(asked))
            return True
        if not self._replay:  # before initialize: the SDK says what is wrong
            return False
        if method == "ping":
            self._reply(request_id, {})
            return True
        if method == "tools/list" and not (isinstance(params, dict) and params.get("cursor")):
            self._listing_known.wait()
            if self._listing is not None:
                self._reply(request_id, {"tools": self._listing})
                return True
        return False

    def _reply(self, request_id: object, result: dict[str, Any]) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")

    def _forward(self, line: bytes | None) -> None:
        with self._state:
            if self._queue is None:
                self._pending.append(line)
                return
            assert self._loop is not None
            queue = self._queue
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody reads
                self._loop.call_soon_threadsafe(queue.put_nowait, line)

    # -- the wire, both sides of the hand-over --------------------------------

    def send(self, text: str) -> None:
        """Write one message; a client that went away is noted, never raised."""
        data = text.encode()
        with self._write:
            if self._broken:
                return
            try:
                while data:
                    data = data[os.write(self._write_fd, data) :]
            except OSError:  # EPIPE: the client closed its end
                self._broken = True
                if not self.client_gone:
                    self.client_gone = True
                    self._forward(None)

    # -- the hand-over ------------------------------------------------------------

    def handover(self) -> None:
        """From now on every message goes to the SDK server (`lines()`), starting with
        the `initialize` the front answered and whatever arrived meanwhile."""
        import asyncio

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        with self._state:
            for line in [*self._replay, *self._pending]:
                queue.put_nowait(line)
            self._pending.clear()
            self._loop, self._queue = loop, queue

    async def lines(self) -> AsyncIterator[str]:
        """The client's messages, for the SDK's `stdio_server(stdin=…)`."""
        assert self._queue is not None, "handover() first"
        while (line := await self._queue.get()) is not None:
            yield line.decode("utf-8", errors="replace")

    def writer(self) -> FrontWriter:
        return FrontWriter(self)

    def drops(self, text: str) -> bool:
        """Whether `text` is the SDK's second answer to the `initialize` the front
        already answered (sent once, so dropped once)."""
        if self._drop_id is None or ('"result"' not in text and '"error"' not in text):
            return False
        try:
            message = json.loads(text)
        except ValueError:
            return False
        if (
            isinstance(message, dict)
            and "method" not in message
            and message.get("id") == (self._drop_id)
        ):
            self._drop_id = None
            return True
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._write_fd)

    def wait_input_ended(self, timeout: float) -> bool:
        """Wait until the reader has seen the end of the client's input (True), so
        its descriptor may be closed without the reader reading whatever file takes
        that number next; False after `timeout` seconds."""
        self._reader.join(timeout)
        return not self._reader.is_alive()


class FrontWriter:
    """The SDK's stdout (`stdio_server(stdout=…)`): its messages, written off the event
    loop, except the duplicate `initialize` answer."""

    def __init__(self, front: StdioFront) -> None:
        self.front = front

    async def write(self, text: str) -> int:
        if not self.front.drops(text):
            import asyncio

            await asyncio.to_thread(self.front.send, text)
        return len(text)

    async def flush(self) -> None:
        return None


def initialize_result(asked: object) -> dict[str, Any]:
    """The `initialize` result, as the SDK server gives it (see the module doc)."""
    version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": CAPABILITIES,
        "serverInfo": {"name": SERVER_NAME, "version": __version__},
        "instructions": INSTRUCTIONS,
    }


_prepared: StdioFront | None = None
"""The front `prepare_on_stdio` made, not started yet."""
_started: StdioFront | None = None
"""The front `start_on_stdio` began for this process (at most one: it owns stdio)."""


def prepare_on_stdio() -> StdioFront:
    """This process's stdio front, which has answered the client's first message (its
    `initialize`) but not started reading the rest: `orchestrator.launch` then forks
    the session's process (`keeper`), which starts it."""
    global _prepared
    if _prepared is None:
        _prepared = StdioFront.on_stdio()
        _prepared.answer_first()
    return _prepared


def start_on_stdio() -> StdioFront:
    """This process's stdio front, started (once): `orchestrator.launch` calls it for
    `warden mcp` on stdio before click and the command load, and the command takes it."""
    global _started
    if _started is None:
        _started = (_prepared or StdioFront.on_stdio()).start()
    return _started
