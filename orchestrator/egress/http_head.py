"""One proxy request head, parsed strictly, and the head the proxy sends instead.

h11 parses the request (request line, header names and values, versions, Host
rules); on top of it the proxy refuses what h11 tolerates but a server behind the
proxy might read differently, since any such difference lets a second request
(for another host) hide inside the first:
- a bare LF or a bare CR anywhere in the head (h11 accepts LF line ends);
- obs-fold, a header line continued on the next (h11 unfolds it);
- more than one `Content-Length` line, or a list in one (h11 merges equal ones);
- `Transfer-Encoding` at all on plain http (with a length it is the classic
  smuggling pair; chunked bodies go through https instead).
Upstream gets only what the proxy serialises itself (h11 as a client): the
decided host in `Host`, origin-form target, the end-to-end headers, and
`Connection: close`; never the client's bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

MAX_HEAD_BYTES = 32 * 1024
"""Longest request head (request line + headers) read."""
MAX_CONTENT_LENGTH_DIGITS = 15
HOP_HEADERS = frozenset(
    {
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"connection",
        b"keep-alive",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
"""Headers not copied upstream (hop-by-hop ones, and those the proxy writes itself)."""


class HeadRefused(ValueError):
    """A request the proxy does not serve; `status` is the HTTP status to answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class ProxyRequest:
    """What one request head asks of the proxy."""

    method: str
    host: str
    port: int
    upstream_head: bytes
    """What goes upstream first (empty for CONNECT)."""
    body_bytes: int | None
    """Request body bytes that follow (plain http), None for a CONNECT tunnel."""


def line_ends_refusal(data: bytes | bytearray, complete: bool) -> str | None:
    """Why `data` (a head, or its start when not `complete`) has a bare CR or LF."""
    if b"\n" in data.replace(b"\r\n", b""):
        return "a bare line feed in the request head"
    stripped = data[:-1] if not complete and data.endswith(b"\r") else data
    if b"\r" in stripped.replace(b"\r\n", b""):
        return "a bare carriage return in the request head"
    return None


def parse_request_head(head: bytes) -> ProxyRequest:
    """The request in `head` (ending with CRLF CRLF). HeadRefused for anything else."""
    if len(head) > MAX_HEAD_BYTES:
        raise HeadRefused(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
    bad = line_ends_refusal(head, complete=True)
    if bad is not None:
        raise HeadRefused(400, f"warden egress: {bad}; send CRLF line ends")
    lines = head[:-4].split(b"\r\n")
    if any(line[:1] in (b" ", b"\t") for line in lines[1:]):
        raise HeadRefused(400, "warden egress: a folded header line (obs-fold) is refused")
    fields = [line.split(b":", 1) for line in lines[1:]]
    names = [field[0].strip().lower() for field in fields]
    if any(
        name == b"content-length" and b"," in field[-1]
        for name, field in zip(names, fields, strict=True)
    ):
        raise HeadRefused(400, "warden egress: a list in Content-Length is refused")
    request = _h11_request(head)
    method = request.method.decode("ascii")
    target = request.target.decode("ascii")
    if method == "CONNECT":
        host, port = authority(target, default_port=None)
        return ProxyRequest(method, host, port, b"", None)
    if not target.lower().startswith("http://"):
        raise HeadRefused(
            400,
            "warden egress: only CONNECT and absolute http:// requests are proxied "
            "(https goes through CONNECT)",
        )
    url = urlsplit(target)
    if "@" in url.netloc:
        raise HeadRefused(400, "warden egress: credentials in the URL are not forwarded")
    host, port = authority(url.netloc, default_port=80)
    body = _body_bytes(names, request.headers)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [
        (name, value)
        for name, value in request.headers.raw_items()
        if name.lower() not in HOP_HEADERS
    ]
    headers = [(b"Host", url.netloc.encode("ascii")), *kept]
    if body:
        headers.append((b"Content-Length", str(body).encode("ascii")))
    headers.append((b"Connection", b"close"))
    out = h11.Connection(h11.CLIENT)
    data = out.send(
        h11.Request(method=request.method, target=path.encode("ascii"), headers=headers)
    )
    assert data is not None
    return ProxyRequest(method, host, port, data, body)


def _h11_request(head: bytes) -> h11.Request:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        conn.receive_data(head)
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise HeadRefused(400, f"warden egress: malformed request ({exc})") from None
    if not isinstance(event, h11.Request):
        raise HeadRefused(400, "warden egress: not an HTTP/1.x proxy request")
    return event


def _body_bytes(names: list[bytes], headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The one Content-Length (0 without one); chunked bodies, duplicate or listed
    lengths refused, so the proxy always knows where the one request it decided on
    ends."""
    if b"transfer-encoding" in names:
        raise HeadRefused(
            411,
            "warden egress: Transfer-Encoding is not proxied over plain http (send a "
            "Content-Length, or use https)",
        )
    if names.count(b"content-length") > 1:
        raise HeadRefused(400, "warden egress: more than one Content-Length header")
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit() or len(value) > MAX_CONTENT_LENGTH_DIGITS:
                raise HeadRefused(400, "warden egress: invalid Content-Length")
            return int(value)
    return 0


def authority(text: str, default_port: int | None) -> tuple[str, int]:
    """(host, port) of `host:port`, `[v6]:port`, or a bare host with `default_port`."""
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise HeadRefused(400, f"warden egress: {text[:100]!r} is not host:port")
        host, port_text = text[: end + 1], text[end + 1 :].removeprefix(":")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not port_text:
        if default_port is None:
            raise HeadRefused(400, f"warden egress: CONNECT {text[:100]!r} needs host:port")
        return host, default_port
    if not port_text.isdigit() or len(port_text) > 5:
        raise HeadRefused(400, f"warden egress: {text[:100]!r} has no valid port")
    return host, int(port_text)
