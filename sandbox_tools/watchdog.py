"""The runner stops by itself when the host side of its task goes away.

A daemon thread holds one request open on the broker's `GET /v1/alive`, which the
broker answers only when it closes. Either an answer, or the connection dropping
(the orchestrator died: the kernel closes its sockets, even after SIGKILL), means
nobody will decide this subagent's tool calls or read its result any more: the
thread kills the tools' process groups and ends the process at once. The runner is
the child of the container's init, so the container then stops by itself.

No polling: the thread sleeps in `recv` until the kernel wakes it. Written with the
standard library's socket module because it must work while the main thread is
blocked inside the HTTP client or a tool.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable

from sandbox_tools import wire

EXIT_HOST_GONE = 3
"""Exit status of a runner whose broker went away."""


def wait_for_close(socket_path: str) -> str | None:
    """Block until the broker answers or drops the liveness request; say which.
    None when the broker does not offer the endpoint (nothing to watch)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(socket_path)
            sock.sendall(f"GET {wire.ALIVE_PATH} HTTP/1.1\r\nHost: warden-broker\r\n\r\n".encode())
            data = sock.recv(4096)
    except OSError as exc:
        return f"the broker connection failed ({exc.strerror or exc})"
    if not data:
        return "the broker connection dropped (the orchestrator is gone)"
    if data.split(b"\r\n", 1)[0].split(b" ")[1:2] != [b"200"]:
        return None
    return "the broker closed (the host ended this task)"


def start(
    socket_path: str,
    kill_tools: Callable[[], None],
    exit_process: Callable[[int], object] = os._exit,
) -> threading.Thread:
    """Watch the broker at `socket_path` from a daemon thread; when it goes, call
    `kill_tools` and end the process with EXIT_HOST_GONE."""

    def watch() -> None:
        why = wait_for_close(socket_path)
        if why is None:
            return
        try:
            kill_tools()
        finally:
            sys.stderr.write(f"warden runner: {why}; stopped the tools and exiting\n")
            sys.stderr.flush()
            exit_process(EXIT_HOST_GONE)

    thread = threading.Thread(target=watch, name="warden-broker-watchdog", daemon=True)
    thread.start()
    return thread
