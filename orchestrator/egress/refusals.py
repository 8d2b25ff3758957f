"""What a refused client is told: a one-line HTTP refusal, or a TLS alert after `200`.

Owns the wording on the wire of every refusal the proxy sends (status line, the
`X-Warden-Egress` header, the body) and the over-cap close on the accepting thread."""

from __future__ import annotations

import asyncio
import contextlib
import socket

TLS_ALERT_UNRECOGNIZED_NAME = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70])
"""A fatal TLS alert (unrecognized_name): what a TLS client understands after `200`."""
_PHRASES = {
    400: "Bad Request",
    403: "Forbidden",
    411: "Length Required",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
}


def close_over_cap(conn: socket.socket, why: str) -> None:
    """A connection over the open-connection cap: a `429` if it fits the socket's
    buffer at once (never a wait), then closed, on the accepting thread."""
    with contextlib.suppress(OSError):
        conn.setblocking(False)
        conn.send(refusal(429, f"refused: {why} is reached"))
    conn.close()


def refusal(status: int, reason: str) -> bytes:
    """A complete `status` response whose body and `X-Warden-Egress` header are the
    reason (one line, at most 1000 characters; the header in ASCII)."""
    line = " ".join(reason.split())[:1000]
    body = (line + "\n").encode("utf-8", "replace")
    header_line = line.encode("ascii", "replace").decode("ascii")
    head = (
        f"HTTP/1.1 {status} {_PHRASES.get(status, 'Bad Request')}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nX-Warden-Egress: {header_line}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


async def refuse(sock: socket.socket, status: int, reason: str) -> None:
    """Send `sock` the refusal; a client already gone is not an error."""
    with contextlib.suppress(OSError):
        await asyncio.get_running_loop().sock_sendall(sock, refusal(status, reason))
