"""What arrives on the proxy's Unix socket: a passed TCP connection, the forwarder's
passed listening socket, or the client itself.

The in-container forwarder (`sandbox_tools.egress_forward`) listens on the
sandbox's 127.0.0.1. At start it offers the proxy that listening socket itself
(`SCM_RIGHTS`, marker byte `LISTENER`); the proxy answers `TAKEN` and from then on
accepts the sandbox's TCP connections on it directly: no forwarder process wakes, no
Unix connection and hand-over per connection. A socket that comes from the sandbox
lives in the sandbox's network namespace, whose only interface is `lo`, so every
connection accepted on it was made inside that sandbox. It is accepted only from a
peer that passed the proxy's peer checks (the same uid and group checks as every
connection), only if it is a listening TCP socket, and at most
`MAX_PASSED_LISTENERS` per proxy. When it is not taken the forwarder passes each
accepted connection instead (`HANDOVER`), as before. A connection that sends
anything else is served as the client itself.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from array import array
from dataclasses import dataclass

from orchestrator.egress.tunnel import BufferedSocket

HANDOVER = b"\0"
"""The byte the forwarder sends with a passed connection (`egress_forward.HANDOVER`)."""
LISTENER = b"L"
"""The byte the forwarder sends with its listening socket (`egress_forward.LISTENER`)."""
TAKEN = b"+"
"""The proxy's answer when it took a passed listening socket (`egress_forward.TAKEN`)."""
ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""Accept errors that pass (out of descriptors or memory): retry later, keep the socket."""
MAX_PASSED_LISTENERS = 4
"""Listening sockets one proxy accepts on (a sandbox's forwarder passes one; the runner
and a `warden exec` command each start one forwarder)."""


class HandoverRefused(OSError):
    """Something was passed that the proxy does not serve; it was closed unused."""


@dataclass
class PassedListener:
    """The forwarder's listening socket (checked: a listening TCP socket)."""

    sock: socket.socket


async def received(conn: socket.socket, timeout_s: float) -> BufferedSocket | PassedListener:
    """What the peer on `conn` passed: the TCP connection (then `conn` is closed),
    its listening socket, or `conn` itself with the byte it sent. HandoverRefused for a
    passed descriptor of any other kind (only the sandbox can pass one)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    # Room for one descriptor: the kernel closes any more a client sends.
    space = socket.CMSG_SPACE(array("i").itemsize)
    try:
        data, ancillary, _, _ = conn.recvmsg(1, space)
    except BlockingIOError:
        loop.add_reader(conn.fileno(), readable)
        try:
            async with asyncio.timeout(timeout_s):
                await ready
        finally:
            loop.remove_reader(conn.fileno())
        data, ancillary, _, _ = conn.recvmsg(1, space)
    fds = array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not fds:
        return BufferedSocket(conn, data)
    passed = socket.socket(fileno=fds[0])
    for extra in fds[1:]:
        os.close(extra)
    listening = _is_tcp_stream(passed) and _is_listening(passed)
    if data == LISTENER and listening:
        passed.setblocking(False)
        return PassedListener(passed)
    if data != HANDOVER or not _is_tcp_stream(passed) or listening:
        passed.close()
        raise HandoverRefused("the forwarder passed something that is not a TCP connection")
    conn.close()
    return BufferedSocket(client_socket(passed))


def accept_waiting(listener: socket.socket) -> tuple[list[socket.socket], OSError | None]:
    """Every connection waiting on a passed listening socket (ready for the proxy),
    and the error that stopped accepting, if any other than "nothing more waits"."""
    accepted: list[socket.socket] = []
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return accepted, None
        except OSError as exc:
            return accepted, exc
        accepted.append(client_socket(conn))


def client_socket(sock: socket.socket) -> socket.socket:
    """A sandbox's TCP connection, ready for the proxy (non-blocking, no Nagle delay)."""
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _is_tcp_stream(sock: socket.socket) -> bool:
    try:
        protocol = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL)
    except OSError:
        return False
    return (
        sock.family in (socket.AF_INET, socket.AF_INET6)
        and sock.type == socket.SOCK_STREAM
        and protocol == socket.IPPROTO_TCP
    )


def _is_listening(sock: socket.socket) -> bool:
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    except OSError:
        return False
