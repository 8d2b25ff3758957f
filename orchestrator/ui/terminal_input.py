"""Lines typed at the terminal, for the approval prompt.

One daemon thread reads them and hands them to the event loop, so a prompt waiting
for a line can be cancelled (its question was answered on the page or by a webhook)
without leaving a thread blocked in `readline` that would swallow the answer meant
for the next question. A real terminal is read from its file descriptor, never
through `sys.stdin`'s buffer: a thread blocked inside that buffer's lock would stop
the interpreter from exiting cleanly.

While the live prompt is up (`keys`), the terminal is in cbreak mode: each key
arrives at once, warden edits the line itself (backspace, Ctrl-U, Ctrl-W; escape
sequences such as arrow keys are dropped) and shows it (`typed`), so the task table
can keep redrawing below the prompt without erasing what the person types.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator
from typing import TextIO

READ_CHUNK = 4096
"""Bytes read from the terminal at a time."""
MAX_LINE_CHARS = 64 * 1024
"""Longest line kept; a longer one is cut (an answer is a letter or a short reason)."""
MAX_ESCAPE_CHARS = 16
"""Longest escape sequence (a key such as an arrow) skipped as one."""


class LineReader:
    """`await readline()` for a text stream; '' at end of input, then always ''."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._queue: asyncio.Queue[tuple[float, str]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stale_before = 0.0
        self._withdrawn = False
        self.typed = ""
        """The line being typed (cbreak mode), for the prompt to show."""
        self.on_typing: Callable[[], None] | None = None
        """Called (on the loop) whenever `typed` changes."""
        self._escape = ""

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

    @property
    def terminal_fd(self) -> int | None:
        """The terminal's file descriptor, when the stream is one."""
        return _terminal_fd(self._stream)

    @contextlib.contextmanager
    def keys(self) -> Iterator[None]:
        """Cbreak mode for the duration: keys arrive one by one, unechoed; warden
        shows `typed`. The terminal's settings are restored on every way out."""
        fd = self.terminal_fd
        if fd is None:
            yield
            return
        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd, termios.TCSANOW)
        try:
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, saved)

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
        line: list[str] = []
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError:
                chunk = b""
            for char in decoder.decode(chunk, final=not chunk):
                done = self._key(line, char)
                if done is not None and not self._put(done):
                    return
            self._show(line)
            if not chunk:
                if line:
                    self._put("".join(line))
                self._put("")
                return

    def _key(self, line: list[str], char: str) -> str | None:
        """Edit `line` by one key; a finished line (with its newline) when Enter."""
        if self._escape:  # inside an escape sequence (an arrow key): dropped
            self._escape += char
            opener = len(self._escape) == 2 and char in "[O"
            ended = not opener and (len(self._escape) == 2 or char.isalpha() or char == "~")
            if ended or len(self._escape) > MAX_ESCAPE_CHARS:
                self._escape = ""
            return None
        if char in "\r\n":
            done = "".join(line) + "\n"
            line.clear()
            return done
        if char == "\x1b":
            self._escape = char
        elif char in ("\x7f", "\b"):
            if line:
                line.pop()
        elif char == "\x15":  # Ctrl-U: the whole line
            line.clear()
        elif char == "\x17":  # Ctrl-W: the last word
            while line and line[-1] == " ":
                line.pop()
            while line and line[-1] != " ":
                line.pop()
        elif char.isprintable() and len(line) < MAX_LINE_CHARS:
            line.append(char)
        return None

    def _show(self, line: list[str]) -> None:
        typed = "".join(line)
        if typed == self.typed or self._loop is None:
            return
        self.typed = typed
        if self.on_typing is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.on_typing)


def _terminal_fd(stream: TextIO) -> int | None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if stream.isatty():
            return stream.fileno()
    return None
