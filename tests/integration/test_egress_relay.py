"""The egress proxy's kernel relay, from inside a real sandbox (`warden exec`'s egress
with the in-container forwarder): a 30 MB download arrives intact byte for byte; a
byte cap cuts a download at exactly the cap, mid-splice, and the summary says so;
through a raw TCP tunnel, the client's end of stream reaches the server, which can
still answer, and the server's end of stream reaches the client, which can still
send. Every upstream is a test server on 127.0.0.1, reached only through the
proxy's in-process test resolver."""

from __future__ import annotations

import hashlib
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.egress.flags import EgressFlags
from orchestrator.egress.limits import EgressLimits
from tests.egress_support import pattern, upstream
from tests.integration.egress_probe import run_probe

pytestmark = pytest.mark.integration

BIG = 30_000_000
CAP = 1_234_567
"""Not a multiple of any chunk, buffer or pipe size."""
UPLOAD = 4_000_000
SERVER_HALF = 3_000_000
AFTER_EOF = 1_000_000
PROBE = r"""
import hashlib, json, os, socket, sys, urllib.request

mode = sys.argv[1]
http_port, raw_port, BIG, UPLOAD, SERVER_HALF, AFTER_EOF = map(int, sys.argv[2:])
PHOST, PPORT = os.environ["HTTP_PROXY"].removeprefix("http://").rsplit(":", 1)
out = {}


def pattern(n):
    return hashlib.shake_256(b"warden relay").digest(n)


def read_all(s):
    chunks = []
    while chunk := s.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def tunnel():
    s = socket.create_connection((PHOST, int(PPORT)), timeout=120)
    target = f"raw.test:{raw_port}"
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    return s


if mode == "whole":
    with urllib.request.urlopen(f"http://big.test:{http_port}/pattern/{BIG}", timeout=120) as r:
        body = r.read()
    out["big"] = [len(body), hashlib.sha256(body).hexdigest()]
    s = tunnel()  # the client ends first; the server answers after
    s.sendall(b"UPLOAD\n" + pattern(UPLOAD)[::-1])
    s.shutdown(socket.SHUT_WR)
    out["upload_answer"] = read_all(s).decode()
    s.close()
    s = tunnel()  # the server ends first; the client still sends
    s.sendall(f"DOWNLOAD {SERVER_HALF}\n".encode())
    got = read_all(s)
    out["download"] = [len(got), hashlib.sha256(got).hexdigest()]
    s.sendall(pattern(AFTER_EOF))
    s.shutdown(socket.SHUT_WR)
    out["after_eof_end"] = read_all(s).decode()
    s.close()
else:
    s = socket.create_connection((PHOST, int(PPORT)), timeout=120)
    url = f"http://big.test:{http_port}/pattern/{BIG}"
    s.sendall(f"GET {url} HTTP/1.1\r\nHost: big.test:{http_port}\r\n\r\n".encode())
    got = read_all(s)  # the proxy ends the connection at the cap
    head, _, body = got.partition(b"\r\n\r\n")
    out["cut"] = [len(got), len(body), hashlib.sha256(body).hexdigest()]
print("PROBE " + json.dumps(out))
"""


class _HalfCloseHandler(socketserver.StreamRequestHandler):
    """`UPLOAD`: read to the client's end, answer with its length and digest, end.
    `DOWNLOAD N`: send N bytes, end this side only, then keep reading to the client's
    end and record what came after."""

    after_eof: list[bytes]

    def handle(self) -> None:
        self.connection.settimeout(120)
        line = self.rfile.readline().decode().split()
        if line == ["UPLOAD"]:
            data = self.rfile.read()
            self.wfile.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}".encode())
        elif line[:1] == ["DOWNLOAD"]:
            self.wfile.write(pattern(int(line[1])))
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.server.after_eof.append(self.rfile.read())  # type: ignore[attr-defined]


class _HalfCloseServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HalfCloseHandler)
        self.after_eof: list[bytes] = []


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[int, _HalfCloseServer]]:
    raw = _HalfCloseServer()
    threading.Thread(target=raw.serve_forever, daemon=True).start()
    try:
        with upstream() as http_port:
            yield http_port, raw
    finally:
        raw.shutdown()
        raw.server_close()


def probe(
    settings: Settings, workspace: Path, session: str, mode: str, http_port: int, raw_port: int,
    limits: EgressLimits,
) -> tuple[dict[str, Any], dict[str, object]]:  # fmt: skip
    """Run the probe in a real sandbox behind one proxy; (its output, the summary)."""
    args = [mode, *map(str, (http_port, raw_port, BIG, UPLOAD, SERVER_HALF, AFTER_EOF))]
    flags = EgressFlags(("big.test", f"tcp://raw.test:{raw_port}"), (), limits)
    hosts = {"big.test": "127.0.0.1", "raw.test": "127.0.0.1"}
    return run_probe(settings, workspace, session, mode, PROBE, args, flags, hosts)


def test_large_transfers_and_half_closes_through_a_real_sandbox(
    settings: Settings, workspace: Path, test_session: str,
    servers: tuple[int, _HalfCloseServer],
) -> None:  # fmt: skip
    http_port, raw = servers
    out, summary = probe(
        settings, workspace, test_session, "whole", http_port, raw.server_address[1],
        EgressLimits(),
    )  # fmt: skip
    assert out["big"] == [BIG, hashlib.sha256(pattern(BIG)).hexdigest()]
    # The client's end of stream reached the server, which answered after it.
    uploaded = pattern(UPLOAD)[::-1]
    assert out["upload_answer"] == f"{UPLOAD} {hashlib.sha256(uploaded).hexdigest()}"
    # The server's end of stream reached the client, which still sent (all of it).
    assert out["download"] == [SERVER_HALF, hashlib.sha256(pattern(SERVER_HALF)).hexdigest()]
    assert out["after_eof_end"] == ""
    assert raw.after_eof == [pattern(AFTER_EOF)]
    assert summary["cut"] is None
    assert summary["connections"] == 3
    assert int(str(summary["bytes_down"])) >= BIG + SERVER_HALF
    assert int(str(summary["bytes_up"])) >= UPLOAD + AFTER_EOF


def test_a_byte_cap_cuts_a_download_at_exactly_the_cap_in_a_real_sandbox(
    settings: Settings, workspace: Path, test_session: str,
    servers: tuple[int, _HalfCloseServer],
) -> None:  # fmt: skip
    http_port, raw = servers
    out, summary = probe(
        settings, workspace, test_session, "cut", http_port, raw.server_address[1],
        EgressLimits(max_bytes_down=CAP),
    )  # fmt: skip
    received, body_bytes, digest = out["cut"]
    assert received == CAP  # the response head counts; nothing past the cap arrives
    assert digest == hashlib.sha256(pattern(BIG)[:body_bytes]).hexdigest()
    assert summary["bytes_down"] == CAP
    assert summary["cut"] == f"the task's limit of {CAP} bytes received"
