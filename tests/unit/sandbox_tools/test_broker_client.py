"""The runner's broker client puts a request on the socket in one write, head and
body together: written in two, the broker wakes twice and waits for the body's half
on every permission request."""

from __future__ import annotations

from sandbox_tools.broker import UnixHTTPConnection


class _Socket:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def test_a_request_with_a_body_goes_in_one_write() -> None:
    conn = UnixHTTPConnection("/nowhere.sock", 1.0)
    sock = _Socket()
    conn.sock = sock
    body = b'{"tool_use_id": "t1", "tool_name": "Bash", "tool_input": {}}'
    conn.request("POST", "/v1/permission", body=body, headers={"Host": "warden-broker"})
    [written] = sock.writes
    head, _, sent_body = written.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/permission HTTP/1.1\r\n")
    assert b"Content-Length: %d" % len(body) in head
    assert sent_body == body


def test_a_request_without_a_body_is_one_write_too() -> None:
    conn = UnixHTTPConnection("/nowhere.sock", 1.0)
    sock = _Socket()
    conn.sock = sock
    conn.request("GET", "/v1/spec", headers={"Host": "warden-broker"})
    [written] = sock.writes
    assert written.startswith(b"GET /v1/spec HTTP/1.1\r\n") and written.endswith(b"\r\n\r\n")
