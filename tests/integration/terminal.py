"""Runs a command on a real pseudo-terminal, as a person's shell would, and hands
everything it prints to a callback that may type answers (stdlib `pty`)."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Reader = Callable[[int, bytes], None]
"""Called with the terminal's fd (write answers to it) and each chunk printed."""
NEXT_PAGE = b"[Enter] next page"
"""What warden's pager prints at the end of each page but the last."""


class PagingPerson:
    """A person at a paged review: presses Enter at the end of each page, and types
    the next of `answers` each time one of `prompts` is printed (nothing once they
    have run out). `feed` is a `Reader`; `out` is everything printed."""

    def __init__(self, answers: list[bytes], prompts: tuple[bytes, ...]) -> None:
        self.out = b""
        self.pages = 0
        self.answers = list(answers)
        self.prompts = prompts
        self._seen = 0

    def feed(self, fd: int, chunk: bytes) -> None:
        self.out += chunk
        new = self.out[self._seen :]
        if NEXT_PAGE in new:
            self._seen = len(self.out)
            self.pages += 1
            os.write(fd, b"\n")
        elif any(prompt in new for prompt in self.prompts):
            self._seen = len(self.out)
            if self.answers:
                os.write(fd, self.answers.pop(0) + b"\n")


def run_on_a_terminal(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    on_output: Reader,
    deadline_s: float,
    modes_after: list[list[Any]] | None = None,
) -> tuple[int, bytes]:
    """Run argv with a pty as stdin, stdout and stderr; return its exit status and all
    it printed. Past `deadline_s` it is interrupted (SIGINT), as a person would. With
    `modes_after`, the terminal's settings (termios) once the command ended are
    appended to it."""
    fd, tty = pty.openpty()
    tty_path = os.ttyname(tty)
    child = subprocess.Popen(
        argv, stdin=tty, stdout=tty, stderr=tty, env=env, cwd=cwd, start_new_session=True
    )
    os.close(tty)
    out, deadline = b"", time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            out += chunk
            on_output(fd, chunk)
        code = child.wait(timeout=max(1.0, deadline - time.monotonic()))
        if modes_after is not None:
            slave = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
            try:
                modes_after.append(termios.tcgetattr(slave))
            finally:
                os.close(slave)
        with contextlib.suppress(OSError):
            while select.select([fd], [], [], 0.2)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                out += chunk
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            child.wait(timeout=30)
        os.close(fd)
    return code, out
