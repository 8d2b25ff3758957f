"""The Bash tool: one `bash -c` per call, in its own session, killed as a group.

Each call gets a new session (`start_new_session`), so the shell and everything
it starts share one process group. On timeout the whole group gets SIGKILL.
When the shell exits normally, processes it left in the background are
stopped too: a tool call never leaves work running behind the model's back,
and the pipe they hold cannot keep the call waiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import IO

from sandbox_tools.errors import ToolError
from sandbox_tools.tools.base import ToolContext, ToolOutput
from sandbox_tools.tools.inputs import BashInput

BASH_OUTPUT_LIMIT = 30_000
"""Bytes of combined stdout/stderr shown; the first and last halves are kept."""

BASH_READ_CHUNK = 64 * 1024
"""Bytes read from the pipe at a time."""

BASH_EXIT_GRACE_S = 0.2
"""After the shell exits, how long its background processes may keep the output open."""

BASH_DRAIN_TIMEOUT_S = 2.0
"""After the group is killed, how long to wait for the output pipe to close."""

BASH_DETAIL_CHARS = 120
"""Longest command shown in progress events."""


class _CappedCapture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def drain(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        while chunk := os.read(fd, BASH_READ_CHUNK):
            self.total += len(chunk)
            room = self._half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self._half:
                    del self.tail[: len(self.tail) - self._half]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if self.total <= len(self.head) + len(self.tail):
            return head + self.tail.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        note = (
            f"\n[output truncated: {omitted} of {self.total} bytes omitted from the middle; "
            f"at most {BASH_OUTPUT_LIMIT} bytes are shown — redirect to a file and Read or "
            "Grep it for more]\n"
        )
        return head + note + self.tail.decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> bool:
    """SIGKILL the process group; True if anything was still in it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def describe(inp: BashInput) -> str:
    """Short text for progress events."""
    command = " ".join(inp.command.split())
    if len(command) > BASH_DETAIL_CHARS:
        command = command[: BASH_DETAIL_CHARS - 1] + "…"
    return command


def bash(inp: BashInput, ctx: ToolContext) -> ToolOutput:
    timeout_s = inp.timeout / 1000 if inp.timeout is not None else ctx.bash_timeout_s
    try:
        proc = subprocess.Popen(
            ["bash", "-c", inp.command],
            cwd=ctx.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"cannot start bash: {e.strerror or e}") from e
    assert proc.stdout is not None
    capture = _CappedCapture(BASH_OUTPUT_LIMIT)
    reader = threading.Thread(target=capture.drain, args=(proc.stdout,), daemon=True)
    reader.start()
    timed_out = False
    stopped_background = False
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)  # the leader is not reaped yet, so the group id is still ours
    finally:
        if proc.poll() is None:  # an exception (e.g. KeyboardInterrupt) cut the wait short
            _kill_group(proc.pid)
        proc.wait()
    if not timed_out:
        reader.join(BASH_EXIT_GRACE_S)
        if reader.is_alive():  # background processes still hold the pipe open
            stopped_background = _kill_group(proc.pid)
    reader.join(BASH_DRAIN_TIMEOUT_S)
    output_open = reader.is_alive()
    if not output_open:
        proc.stdout.close()

    text = capture.text().rstrip("\n") or "(no output)"
    notes: list[str] = []
    if output_open:
        notes.append("[a process outside the command's process group still holds its output]")
    if stopped_background:
        notes.append("[processes the command left running in the background were stopped]")
    if timed_out:
        notes.append(
            f"[timed out after {timeout_s:g} s: the command and every process it started "
            "were killed; pass a larger timeout (in milliseconds) if it needs longer]"
        )
        return ToolOutput("\n".join([text, *notes]), is_error=True, summary="timed out")
    code = proc.returncode
    status = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    notes.append(f"[{status}]")
    return ToolOutput("\n".join([text, *notes]), is_error=code != 0, summary=status)
