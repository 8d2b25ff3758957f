"""What arrives on the proxy's Unix socket: the forwarder's passed listening socket,
or the client itself.

The in-container forwarder (`sandbox_tools.egress_forward`) listens on the
sandbox's 127.0.0.1. At start it offers the proxy that listening socket itself
(`SCM_RIGHTS`, marker byte `LISTENER`); the proxy answers `TAKEN` and from then on
accepts the sandbox's TCP connections on it directly: no forwarder process wakes, no
Unix connection per connection. A socket that comes from the sandbox lives in the
sandbox's network namespace, whose only interface is `lo`, so every connection
accepted on it was made inside that sandbox. It is accepted only from a peer that
passed the proxy's peer checks (the same uid and group checks as every connection),
only if it is a listening TCP socket, and at most `MAX_PASSED_LISTENERS` per proxy.
When it is not taken the forwarder relays each client's bytes over a Unix
connection of its own, which the proxy serves as the client itself.

A passed descriptor shares its open file description, and with it `O_NONBLOCK`,
with the sandbox's copy: the sandbox can make it blocking whenever it likes. So the
proxy never does I/O on a passed socket where a wait would hurt: it accepts on a
passed listener on a thread of its own (`ListenerAcceptor`; what it accepts is the
proxy's own socket), and it takes no passed connection at all (a blocking `recv` on
one would hold the event loop that answers every sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
import socket
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.egress.tunnel import BufferedSocket

LISTENER = b"L"
"""The byte the forwarder sends with its listening socket (`egress_forward.LISTENER`)."""
TAKEN = b"+"
"""The proxy's answer when it took a passed listening socket (`egress_forward.TAKEN`)."""
ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""Accept errors that pass (out of descriptors or memory): retry later, keep the socket."""
ACCEPT_RETRY_S = 0.1
"""How long an accept loop (the proxy's own, or an acceptor's) pauses after such an
error before it accepts again."""
ACCEPT_POLL_MS = 1000
"""How long an acceptor waits for a connection when the sandbox made its listener
non-blocking again (then `accept` says "nothing waits" at once)."""
ACCEPTOR_JOIN_TIMEOUT_S = 5.0
"""How long closing waits for an acceptor's thread to end (it ends at the shutdown)."""

log = logging.getLogger(__name__)
MAX_PASSED_LISTENERS = 4
"""Listening sockets one proxy accepts on (a sandbox's forwarder passes one; the runner
and a `warden exec` command each start one forwarder)."""


class HandoverRefused(OSError):
    """Something was passed that the proxy does not take; it was closed unused."""


@dataclass
class PassedListener:
    """The forwarder's listening socket (checked: a listening TCP socket)."""

    sock: socket.socket


async def received(conn: socket.socket, timeout_s: float) -> BufferedSocket | PassedListener:
    """What the peer on `conn` passed: its listening socket, or `conn` itself with the
    byte it sent. HandoverRefused for a passed descriptor of any other kind (only the
    sandbox can pass one), a passed connection included."""
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
    if data == LISTENER and _is_tcp_stream(passed) and _is_listening(passed):
        return PassedListener(passed)
    passed.close()
    raise HandoverRefused("the forwarder passed something that is not a listening TCP socket")


class ListenerAcceptor:
    """Accepts on a passed listening socket on a thread of its own, and gives each
    connection (the proxy's own socket, made non-blocking) to `deliver`, which must be
    safe to call from that thread. The sandbox shares the listener's blocking flag,
    so the thread copes with either: a blocking `accept` waits on this thread only,
    and a non-blocking one that finds nothing waits in `poll`. It ends when the
    listener is shut down (by `stop`, or by the sandbox) or fails."""

    def __init__(self, listener: socket.socket, deliver: Callable[[socket.socket], None]) -> None:
        self.listener = listener
        self._deliver = deliver
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name="warden-egress-accept", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        """Still accepting (False once the listener was shut down or failed)."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Wake and end the thread, then close the listener (blocking: call off the loop)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # a blocked accept returns at once
        self._thread.join(ACCEPTOR_JOIN_TIMEOUT_S)
        if not self._thread.is_alive():
            self.listener.close()

    def _run(self) -> None:
        self.listener.settimeout(None)  # no poll of Python's own: the kernel flag decides
        poller = select.poll()
        poller.register(self.listener.fileno(), select.POLLIN)
        while not self._stopping:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                poller.poll(ACCEPT_POLL_MS)
                continue
            except OSError as exc:
                if exc.errno in ACCEPT_RESOURCE_ERRORS and not self._stopping:
                    log.warning("egress proxy: accept failed: %s", exc)
                    time.sleep(ACCEPT_RETRY_S)
                    continue
                return  # shut down (by stop, or by the sandbox), or broken: drop it
            if self._stopping:
                conn.close()
                return
            self._deliver(client_socket(conn))


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
