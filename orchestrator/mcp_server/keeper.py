"""`warden mcp` on stdio: the process an MCP client spawns is not the one that holds
the session, so the session's end never depends on the client giving it time.

Claude Code (2.1.197, read in its binary and seen in its logs) ends a stdio MCP
server by its pid alone: SIGINT, SIGTERM 100 ms later, SIGKILL 400 ms after that, and
only then closes the pipes. Ending a warden session takes longer on a loaded machine
(stopping its tasks, removing its containers, writing the result document), so the
spawned process forks before anything else loads (`split`, about two milliseconds),
right after its stdio front has answered the client's first message (`initialize`: a
new process may wait for the CPU on a busy machine, the answer should not):

- the child goes on as `warden mcp` (the stdio front, the SDK server, the run), with
  the client's pipes as its stdin and stdout; its pid is the run's owner. It starts
  a session (and process group) of its own, so a client that kills the group it
  spawned (the Python MCP SDK's stdio client: SIGTERM to the group 2 s after it
  closed the server's input, SIGKILL 2 s later) reaches only the spawned process;
- the parent keeps nothing of the wire (its stdin and stdout become /dev/null) and
  only waits: when the child exits, it exits with the child's status; on a stop
  signal (SIGINT, SIGTERM, SIGHUP) it passes the signal on to the child and exits at
  once with 128 + its number, so the client's kill finds it gone;
- if the parent is killed outright (SIGKILL), the kernel sends the child SIGTERM
  (`PR_SET_PDEATHSIG`, set by `bind_to_parent`): the same stop.

A stop ends the child's session as Ctrl-C ends a run (tasks stopped, containers
removed, result files written), on its own time: the child is not in the client's
kill path, and it never outlives its session: it exits when the session has ended,
and a stop's end is bounded (`lifecycle.interrupts.STOP_GRACE_S`, after which it
exits anyway and the next warden command or `warden cleanup` finds its run by its
dead owner). Only the standard library is imported here: this runs before the front.

Reason to change: how the session's process is kept out of the client's kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The stop signals the spawned process passes on to the session's process."""
PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent dies."""

_parent: int | None = None
"""The spawned process's pid, in the session's process (`split` was called)."""


def split(wire: tuple[int, ...] = ()) -> None:
    """Fork: returns in the child, which goes on as `warden mcp`; in the parent it
    never returns (the parent closes the descriptors `wire` and its stdin and stdout,
    and waits for the child, see the module doc). If the fork fails, it returns in
    this one process, which then holds the session itself."""
    global _parent
    if not hasattr(os, "fork"):
        return  # no fork (not a POSIX system): this process holds the session itself
    parent = os.getpid()
    # No stop signal may land between the fork and the handlers: held until both
    # sides are ready (a pending one is then delivered).
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        child = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        return
    if child == 0:
        _parent = parent
        os.setsid()  # out of the client's process group: only the spawned one is in it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        return
    _wait_for(child, wire)


def bind_to_parent() -> None:
    """In the session's process: get SIGTERM when the spawned process dies (however it
    dies), so a client that SIGKILLs it still stops the session cleanly. Called once the
    front is answering (loading ctypes takes a few milliseconds)."""
    if _parent is None:
        return
    import ctypes

    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None or prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # not Linux: a client's SIGKILL then leaves the session to the pipe's end
    if os.getppid() != _parent:  # it died before the binding: stop now
        os.kill(os.getpid(), signal.SIGTERM)


def _wait_for(child: int, wire: tuple[int, ...]) -> None:
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has just ended by itself
            os.kill(child, signum)
        os._exit(128 + signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    for fd in wire:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    while True:
        try:
            _, status = os.waitpid(child, 0)
        except ChildProcessError:  # not ours to wait for any more: nothing to report
            os._exit(0)
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            break
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)
