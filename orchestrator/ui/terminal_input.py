"""Lines typed at the terminal, for the approval prompt.

One daemon thread reads them and hands them to the event loop, so a prompt waiting
for a line can be cancelled (its question was answered on the page or by a webhook)
without leaving a thread blocked in `readline` that would swallow the answer meant
for the next question. A real terminal is read from its file descriptor, never
through `sys.stdin`'s buffer: a thread blocked inside that buffer's lock would stop
the interpreter from exiting cleanly.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import threading
import time
from typing import TextIO

READ_CHUNK = 4096
"""Bytes read from the terminal at a time."""
MAX_LINE_CHARS = 64 * 1024
"""Longest line kept; a longer one is cut (an answer is a letter or a short reason)."""


class LineReader:
    """`await readline()` for a text stream; '' at end of input, then always ''."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._queue: asyncio.Queue[tuple[float, str]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stale_before = 0.0
        self._withdrawn = False

    async def readline(self) -> str:
        if self._queue is None:
            self._start()
        assert self._queue is not None
        while True:
            at, line = await self._queue.get()
            if not line:
                self._queue.put_nowait((at, line))  # the end stays the end
                return ""
            if at >= self._stale_before:
                return line

    def withdrawn(self) -> None:
        """The prompt on screen was withdrawn: whatever is typed until the next prompt
        is shown (`prompt_shown`) was meant for it, and answers nothing else."""
        self._withdrawn = True

    def prompt_shown(self) -> None:
        if self._withdrawn:
            self._withdrawn = False
            self._stale_before = time.monotonic()

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        fd = _terminal_fd(self._stream)
        target = self._pump_fd if fd is not None else self._pump_stream
        args = (fd,) if fd is not None else ()
        threading.Thread(target=target, args=args, name="warden-prompt-input", daemon=True).start()

    def _put(self, line: str) -> bool:
        """Hand one line to the loop; False once the loop is gone."""
        assert self._loop is not None and self._queue is not None
        try:
            self._loop.call_soon_threadsafe(
                self._queue.put_nowait, (time.monotonic(), line[:MAX_LINE_CHARS])
            )
        except RuntimeError:  # the loop closed: the run is over
            return False
        return True

    def _pump_stream(self) -> None:
        while True:
            try:
                line = self._stream.readline()
            except (OSError, ValueError):
                line = ""
            if not self._put(line) or not line:
                return

    def _pump_fd(self, fd: int) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError:
                chunk = b""
            pending += decoder.decode(chunk, final=not chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                if not self._put(line + "\n"):
                    return
            if len(pending) > MAX_LINE_CHARS:
                pending = pending[:MAX_LINE_CHARS]
            if not chunk:
                if pending:
                    self._put(pending)
                self._put("")
                return


def _terminal_fd(stream: TextIO) -> int | None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if stream.isatty():
            return stream.fileno()
    return None
