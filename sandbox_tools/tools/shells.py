"""Background shells: `Bash` with `run_in_background`, `TaskOutput`, `TaskStop`.

A background command is started like any Bash call (`bash -c`, its own session and
process group, stdin empty, stdout and stderr on one pipe) but the call returns its
shell id at once (`bash_1`, `bash_2`, … in the order they were started). One
daemon thread per shell drains the pipe into memory, keeping at most
`UNREAD_OUTPUT_LIMIT` bytes not yet read (the newest; what was dropped is
announced), so a chatty process can neither block on a full pipe nor grow the
runner. `TaskOutput` hands over what arrived since the last read and whether the
shell still runs; `TaskStop` SIGKILLs its whole process group.

No wall of the sandbox is loosened for them: they run in the sandbox's own
cgroup and pid namespace, so they count against its pids, memory, disk and time
limits, and they end with it (the runner is the child of the container's init;
when the runner exits, or the host kills the container at its deadline, the
kernel ends every process in the namespace). `kill_running` stops them all when
the broker goes away.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import NamedTuple

from sandbox_tools.errors import ToolError
from sandbox_tools.tools.base import BASH_DETAIL_CHARS, ToolContext, ToolOutput, one_line
from sandbox_tools.tools.bash import start_bash
from sandbox_tools.tools.more_inputs import TaskOutputInput, TaskStopInput

MAX_BACKGROUND_SHELLS = 32
"""Most background shells one subagent may start (running or ended); the sandbox's
pids limit is the wall for what they start in turn."""

UNREAD_OUTPUT_LIMIT = 30_000
"""Bytes of a background shell's output kept until `TaskOutput` reads them; older
unread bytes are dropped and the read says how many."""

READ_CHUNK = 64 * 1024
"""Bytes read from a shell's pipe at a time."""

DRAIN_AFTER_EXIT_S = 0.2
"""After a shell ends, how long a read waits for the rest of its output."""

STOP_WAIT_S = 5.0
"""How long `TaskStop` waits for the killed shell to be reaped."""


class _Shell:
    """One background command and what it wrote that nobody has read yet."""

    def __init__(self, shell_id: str, command: str, proc: subprocess.Popen[bytes]) -> None:
        self.shell_id = shell_id
        self.command = command
        self.proc = proc
        self.started = time.monotonic()
        self.stopped = False
        self._lock = threading.Lock()
        self._unread = bytearray()
        self._dropped = 0
        self.eof = threading.Event()
        self._reader = threading.Thread(target=self._drain, name=f"warden-{shell_id}", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        try:
            while chunk := os.read(fd, READ_CHUNK):
                with self._lock:
                    self._unread += chunk
                    excess = len(self._unread) - UNREAD_OUTPUT_LIMIT
                    if excess > 0:
                        del self._unread[:excess]
                        self._dropped += excess
        except OSError:
            pass
        finally:
            self.proc.stdout.close()
            self.eof.set()

    def take(self) -> tuple[str, int]:
        """(output since the last take, bytes dropped unread since then)."""
        with self._lock:
            data, dropped = bytes(self._unread), self._dropped
            self._unread.clear()
            self._dropped = 0
        return data.decode("utf-8", errors="replace"), dropped

    def status(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "running"
        if self.stopped:
            return "stopped"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


class _Table(NamedTuple):
    shells: dict[str, _Shell]
    lock: threading.Lock


_table = _Table({}, threading.Lock())


def start(command: str, description: str | None, ctx: ToolContext) -> ToolOutput:
    """Start `command` in the background; its shell id at once."""
    with _table.lock:
        if len(_table.shells) >= MAX_BACKGROUND_SHELLS:
            raise ToolError(
                f"this agent already started {MAX_BACKGROUND_SHELLS} background shells, the "
                "most it may; run the command in the foreground, or reuse a running one"
            )
        shell_id = f"bash_{len(_table.shells) + 1}"
        proc = start_bash(command, ctx)
        _table.shells[shell_id] = _Shell(shell_id, command, proc)
    what = f" ({one_line(description, BASH_DETAIL_CHARS)})" if description else ""
    return ToolOutput(
        f"Command running in background with ID: {shell_id}{what}. Read its output with "
        f"TaskOutput (task_id {shell_id!r}); stop it with TaskStop. It ends at the latest "
        "with this sandbox.",
        summary=f"background {shell_id}",
    )


def _shell(task_id: str) -> _Shell:
    with _table.lock:
        shell = _table.shells.get(task_id)
        known = ", ".join(_table.shells) or "none"
    if shell is None:
        raise ToolError(f"no background shell {task_id!r} (this agent's shells: {known})")
    return shell


def task_output(inp: TaskOutputInput, ctx: ToolContext) -> ToolOutput:
    """New output of a background shell; with `block`, after waiting for it to end."""
    shell = _shell(inp.task_id)
    if inp.block:
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.proc.wait(timeout=inp.timeout / 1000)
    if shell.proc.poll() is not None:
        shell.eof.wait(DRAIN_AFTER_EXIT_S)
    text, dropped = shell.take()
    status = shell.status()
    notes: list[str] = []
    if dropped:
        notes.append(
            f"[{dropped} earlier bytes were dropped unread: at most {UNREAD_OUTPUT_LIMIT} "
            "unread bytes are kept; read more often, or redirect to a file]"
        )
    running_s = time.monotonic() - shell.started
    if status == "running":
        waited = f"; still running after {running_s:.0f} s" if inp.block else ""
        notes.append(f"[{shell.shell_id}: running{waited}]")
    else:
        notes.append(f"[{shell.shell_id}: {status}]")
    body = text.rstrip("\n") or "(no new output)"
    failed = status not in ("running", "exit code 0")
    return ToolOutput("\n".join([*notes[:-1], body, notes[-1]]), is_error=failed, summary=status)


def task_stop(inp: TaskStopInput, ctx: ToolContext) -> ToolOutput:
    """SIGKILL a background shell's process group."""
    task_id = inp.task_id or inp.shell_id
    if task_id is None:
        raise ToolError("give the task_id of the background shell to stop")
    shell = _shell(task_id)
    if shell.proc.poll() is not None:
        raise ToolError(f"background shell {task_id!r} is not running ({shell.status()})")
    shell.stopped = True
    _kill_group(shell.proc.pid)
    try:
        shell.proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        raise ToolError(f"background shell {task_id!r} did not end after SIGKILL") from None
    command = one_line(shell.command, BASH_DETAIL_CHARS)
    return ToolOutput(
        f"Successfully stopped task: {task_id} ({command})", summary=f"stopped {task_id}"
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def kill_running() -> None:
    """SIGKILL every background shell's process group (the host is gone)."""
    with _table.lock:
        shells = list(_table.shells.values())
    for shell in shells:
        _kill_group(shell.proc.pid)
