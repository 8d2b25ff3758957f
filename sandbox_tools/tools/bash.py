"""The Bash tool: one `bash -c` per call, in its own session, killed as a group.

Each call gets a new session (`start_new_session`), so the shell and everything
it starts share one process group. On timeout the whole group gets SIGKILL.
When the shell exits normally, processes it left in the background are
stopped too: a tool call never leaves work running behind the model's back,
and the pipe they hold cannot keep the call waiting. A command the model asks
to run in the background (`run_in_background`) is a background shell instead
(`shells`): it returns at once and runs until it ends, is stopped, or the
sandbox ends.

One thread does everything: it polls the output pipe and a pidfd (which
becomes readable when the shell exits), so a short command costs about what
`subprocess.run` costs.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass

from sandbox_tools import oom
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

BASH_POLL_FALLBACK_S = 0.05
"""Exit-check interval when the kernel offers no pidfd."""


class _CappedCapture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
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


_running_groups: set[int] = set()
"""Process groups of Bash calls in progress (one per call), for `kill_running`."""


def kill_running() -> None:
    """SIGKILL every Bash call in progress and all it started (the host is gone)."""
    for pgid in list(_running_groups):
        _kill_group(pgid)


def _kill_group(pgid: int) -> bool:
    """SIGKILL the process group; True if anything was still in it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # old kernel, or a seccomp profile without pidfd_open
        return None


@dataclass
class _Outcome:
    timed_out: bool = False
    stopped_background: bool = False
    output_open: bool = False


def _pump(proc: subprocess.Popen[bytes], capture: _CappedCapture, timeout_s: float) -> _Outcome:
    """Collect output until the pipe closes, enforcing the timeout on the whole group."""
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    os.set_blocking(out_fd, False)
    pidfd = _pidfd(proc.pid)
    poller = select.poll()
    poller.register(out_fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    outcome = _Outcome()
    deadline = time.monotonic() + timeout_s
    exited_at: float | None = None
    killed_at: float | None = None
    eof = False
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if eof and exited_at is not None:
                break
            if killed_at is not None:
                wait_until = killed_at + BASH_DRAIN_TIMEOUT_S
            elif exited_at is not None:
                wait_until = exited_at + BASH_EXIT_GRACE_S
            else:
                wait_until = deadline
            if now >= wait_until:
                if killed_at is not None:  # something outside the group holds the pipe
                    outcome.output_open = not eof
                    break
                # The leader is not reaped before its timeout, so the group id is still ours.
                killed = _kill_group(proc.pid)
                if exited_at is None:
                    outcome.timed_out = True
                else:
                    outcome.stopped_background = killed
                killed_at = now
                continue
            wait_s = wait_until - now
            if pidfd is None:
                wait_s = min(wait_s, BASH_POLL_FALLBACK_S)
            for fd, _ in poller.poll(wait_s * 1000):
                if fd == pidfd:
                    poller.unregister(pidfd)  # exited; proc.poll() above reaps it
                elif not eof:
                    try:
                        chunk = os.read(out_fd, BASH_READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if chunk:
                        capture.add(chunk)
                    else:
                        eof = True
                        poller.unregister(out_fd)
    finally:
        if proc.poll() is None:  # an exception (e.g. KeyboardInterrupt) cut the loop short
            _kill_group(proc.pid)
        proc.wait()
        if pidfd is not None:
            os.close(pidfd)
    return outcome


def start_bash(command: str, ctx: ToolContext) -> subprocess.Popen[bytes]:
    """`bash -c command` in the workspace, in a session (and process group) of its own,
    stdin empty, stdout and stderr on one pipe, marked expendable to the OOM killer:
    how every Bash call starts, in the foreground or in the background (`shells`)."""
    try:
        return subprocess.Popen(
            ["bash", "-c", command],
            cwd=ctx.root,
            env={**os.environ, **oom.EXPENDABLE_ENV},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"cannot start bash: {e.strerror or e}") from e


def bash(inp: BashInput, ctx: ToolContext) -> ToolOutput:
    if inp.run_in_background:
        from sandbox_tools.tools import shells

        return shells.start(inp.command, inp.description, ctx)
    timeout_s = inp.timeout / 1000 if inp.timeout is not None else ctx.bash_timeout_s
    ooms_before = oom.oom_kills()
    proc = start_bash(inp.command, ctx)
    capture = _CappedCapture(BASH_OUTPUT_LIMIT)
    _running_groups.add(proc.pid)
    try:
        with proc:  # closes the pipe
            outcome = _pump(proc, capture, timeout_s)
    finally:
        _running_groups.discard(proc.pid)

    text = capture.text().rstrip("\n") or "(no output)"
    notes: list[str] = []
    if outcome.output_open:
        notes.append("[a process outside the command's process group still holds its output]")
    if outcome.stopped_background:
        notes.append("[processes the command left running in the background were stopped]")
    if outcome.timed_out:
        notes.append(
            f"[timed out after {timeout_s:g} s: the command and every process it started "
            "were killed; pass a larger timeout (in milliseconds) if it needs longer]"
        )
        return ToolOutput("\n".join([text, *notes]), is_error=True, summary="timed out")
    code = proc.returncode
    status = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    ooms_after = oom.oom_kills()
    if ooms_before is not None and ooms_after is not None and ooms_after > ooms_before:
        limit = oom.describe_limit(oom.memory_limit())
        status = f"killed: out of memory (limit {limit})"
        notes.append(
            f"[{status}: the kernel ended a process of this command that outgrew the "
            "sandbox's memory; use less memory, or ask for a larger limit]"
        )
        return ToolOutput("\n".join([text, *notes]), is_error=True, summary=status)
    notes.append(f"[{status}]")
    return ToolOutput("\n".join([text, *notes]), is_error=code != 0, summary=status)
