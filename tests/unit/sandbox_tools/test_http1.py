"""The runner's HTTP/1.1 exchange with the broker: a request goes in one write, head
and body together; an answer is read by its Content-Length, chunked, or to the end
of the connection; a kept connection serves the next request; a peer that closes
before answering says so in a way the client may retry, and one that breaks off
mid-answer or does not speak HTTP is an error, never a half answer."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox_tools.http1 import (
    MAX_HEAD_BYTES,
    BadResponseError,
    ConnectionClosedError,
    UnixConnection,
)

WAIT_S = 30.0
"""Generous: nothing waits this long when it works."""

OK_BODY = b'{"ok": true}'
OK_JSON = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(OK_BODY),
    OK_BODY,
)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return data


class Server:
    """A Unix socket peer that answers each request with the next scripted bytes
    (None: close the connection instead), and closes the connection after its last
    answer; counts the connections it accepted."""

    def __init__(self, path: str, answers: list[bytes | None]) -> None:
        self.path = path
        self.answers = answers
        self.accepted = 0
        self.requests: list[bytes] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed by the test: nothing more will come
                return
            self.accepted += 1
            with conn:
                while self.answers:
                    request = _read_request(conn)
                    if not request:
                        break
                    self.requests.append(request)
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    conn.sendall(answer)

    def close(self) -> None:
        self._sock.close()
        self._thread.join(WAIT_S)


@pytest.fixture
def serve() -> Iterator[Callable[[list[bytes | None]], Server]]:
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="h1-") as d:

        def start(answers: list[bytes | None]) -> Server:
            servers.append(Server(str(Path(d) / f"s{len(servers)}.sock"), answers))
            return servers[-1]

        yield start
        for server in servers:
            server.close()


def test_an_answer_is_read_by_its_length_and_the_connection_is_kept(serve: Callable) -> None:
    server = serve([OK_JSON, OK_JSON])
    conn = UnixConnection(server.path, "warden-broker")
    for _ in range(2):
        response = conn.exchange("POST", "/v1/permission", b'{"a": 1}', {}, WAIT_S)
        assert (response.status, response.body, response.will_close) == (
            200,
            b'{"ok": true}',
            False,
        )
    conn.close()
    assert server.accepted == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/permission HTTP/1.1\r\nHost: warden-broker\r\n")
    assert b"Content-Length: 8" in head and body == b'{"a": 1}'


def test_a_chunked_answer_and_one_that_runs_to_the_close_are_read_whole(serve: Callable) -> None:
    chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nnot \r\n5\r\nfound\r\n0\r\n\r\n"
    to_close = b"HTTP/1.0 500 Oops\r\n\r\nbroken"
    server = serve([chunked, to_close])
    conn = UnixConnection(server.path, "h")
    assert conn.exchange("GET", "/x", None, {}, WAIT_S)[:2] == (404, b"not found")
    response = conn.exchange("GET", "/y", None, {}, WAIT_S)
    assert (response.status, response.body, response.will_close) == (500, b"broken", True)
    conn.close()


def test_a_peer_that_closes_before_answering_may_be_asked_again(serve: Callable) -> None:
    server = serve([None])
    conn = UnixConnection(server.path, "h")
    with pytest.raises(ConnectionClosedError):
        conn.exchange("GET", "/v1/spec", None, {}, WAIT_S)
    conn.close()


@pytest.mark.parametrize(
    "answer",
    [
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cut": ',  # ends early
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * MAX_HEAD_BYTES + b"\r\n\r\n",
    ],
    ids=["cut-short", "not-http", "bad-length", "head-too-long"],
)
def test_a_broken_answer_is_an_error_not_a_half_answer(serve: Callable, answer: bytes) -> None:
    server = serve([answer])
    conn = UnixConnection(server.path, "h")
    with pytest.raises(BadResponseError):
        conn.exchange("GET", "/v1/spec", None, {}, WAIT_S)
    conn.close()


class _RecordingSocket:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def settimeout(self, timeout: float | None) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def recv(self, size: int) -> bytes:
        return OK_JSON

    def close(self) -> None:
        pass


def test_a_request_goes_in_one_write() -> None:
    # Written in two (as http.client does), the broker wakes twice per request and
    # waits for the body's half.
    sock = _RecordingSocket()

    class Recorded(UnixConnection):
        def _connect(self) -> socket.socket:
            return sock  # type: ignore[return-value]

    body = b'{"tool_use_id": "t1", "tool_name": "Bash", "tool_input": {}}'
    Recorded("/nowhere.sock", "warden-broker").exchange("POST", "/v1/permission", body, {}, 1.0)
    [written] = sock.writes
    assert written.endswith(b"\r\n\r\n" + body)
