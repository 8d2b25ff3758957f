"""Reaching the address a verdict checked: a TCP connect, never a new name lookup.

Owns how the proxy connects upstream: each checked address in turn, a connect that
finishes within the call spared its event-loop round trip, `CONNECT_TIMEOUT_S` per
address."""

from __future__ import annotations

import asyncio
import os
import select
import socket

from orchestrator.egress.verdict import Verdict

CONNECT_TIMEOUT_S = 15.0
"""Longest the proxy waits for an upstream TCP connect (each address)."""


async def connect(verdict: Verdict) -> socket.socket:
    """A connection to the first checked address that answers (never re-resolved)."""
    loop = asyncio.get_running_loop()
    last: OSError = OSError("no address")
    for address in verdict.addresses:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            if not connected_at_once(sock, (str(address), verdict.port)):
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await loop.sock_connect(sock, (str(address), verdict.port))
        except TimeoutError:
            sock.close()
            last = OSError(f"no answer from {address} within {CONNECT_TIMEOUT_S:g} s")
            continue
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last


def connected_at_once(sock: socket.socket, address: tuple[str, int]) -> bool:
    """Start a non-blocking connect; True when it is already done (a near upstream
    answers within the call), which spares the event loop a round trip per
    connection; False: still under way (the loop's `sock_connect` waits for it).
    OSError when it failed."""
    try:
        sock.connect(address)
        return True
    except BlockingIOError:
        pass
    ready = select.poll()
    ready.register(sock.fileno(), select.POLLOUT)
    if not ready.poll(0):
        return False
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, os.strerror(error))
    return True
