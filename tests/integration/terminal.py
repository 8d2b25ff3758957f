"""Runs a command on a real pseudo-terminal, as a person's shell would, and hands
everything it prints to a callback that may type answers (stdlib `pty`)."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

Reader = Callable[[int, bytes], None]
"""Called with the terminal's fd (write answers to it) and each chunk printed."""


def run_on_a_terminal(
    argv: list[str], env: dict[str, str], cwd: Path, on_output: Reader, deadline_s: float
) -> tuple[int, bytes]:
    """Run argv with a pty as stdin, stdout and stderr; return its exit status and all
    it printed. Past `deadline_s` it is interrupted (SIGINT), as a person would."""
    fd, tty = pty.openpty()
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
