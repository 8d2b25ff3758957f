"""The kernel relay (`splice` through a pipe) over real loopback TCP connections:
bytes arrive intact and in order, byte caps cut at exactly the cap in the middle of
a splice (and count what the client sent before the relay took over), and each
direction's end of stream is passed on while the other direction keeps going."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from orchestrator.egress.limits import EgressLimits, Meter
from orchestrator.egress.relay import KernelRelay, RelayEnd
from tests.egress_support import pattern

WAIT_S = 60.0
"""Generous: these sockets block, and the machine may be loaded."""


def pair() -> tuple[socket.socket, socket.socket]:
    """Both ends of one loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname(), timeout=WAIT_S)
        far, _ = listener.accept()
    far.settimeout(WAIT_S)
    return near, far


def read_all(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


@contextmanager
def relayed(
    meter: Meter, **kw: bytes | int
) -> Iterator[tuple[socket.socket, socket.socket, list[RelayEnd]]]:
    """(client, server, [how the relay ended]): a relay between the two on a thread."""
    client, client_side = pair()
    upstream_side, server = pair()
    dest = meter.destination("x.test", 80)
    relay = KernelRelay(client_side, upstream_side, meter, dest, **kw)  # type: ignore[arg-type]
    ended: list[RelayEnd] = []
    thread = threading.Thread(target=lambda: ended.append(relay.run()), daemon=True)
    thread.start()
    try:
        yield client, server, ended
    finally:
        relay.stop()
        thread.join(WAIT_S)
        client.close()
        server.close()


def sender(sock: socket.socket, data: bytes, *, then_shut: bool = True) -> threading.Thread:
    def send() -> None:
        with contextlib.suppress(OSError):  # a cut ends the connection mid-send
            sock.sendall(data)
            if then_shut:
                sock.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_large_transfer_arrives_intact_both_ways() -> None:
    meter = Meter(EgressLimits())
    down, up = pattern(24_000_000), pattern(6_000_000)[::-1]
    with relayed(meter) as (client, server, _):
        to_client = sender(server, down)
        to_server = sender(client, up)
        got_down, got_up = read_all(client), read_all(server)
        to_client.join(WAIT_S)
        to_server.join(WAIT_S)
    assert got_down == down and got_up == up
    assert (meter.bytes_down, meter.bytes_up, meter.cut) == (len(down), len(up), None)


def test_a_byte_cap_cuts_at_exactly_the_cap_in_the_middle_of_a_splice() -> None:
    cap = 1_234_567  # not a multiple of any chunk or pipe size
    meter = Meter(EgressLimits(max_bytes_down=cap))
    data = pattern(5_000_000)
    with relayed(meter) as (client, server, ended):
        sender(server, data, then_shut=False)
        got = read_all(client)  # the relay ends the connection at the cap
    assert got == data[:cap]
    assert meter.bytes_down == cap
    assert meter.cut == f"the task's limit of {cap} bytes received"
    assert ended == [RelayEnd.CUT]


def test_bytes_the_client_sent_before_the_relay_count_against_the_cap() -> None:
    """A request body that arrived with its head is metered like spliced bytes; the
    proxy's own request head is not."""
    meter = Meter(EgressLimits(max_bytes_up=10))
    head = b"POST / HTTP/1.1\r\nHost: x.test\r\nContent-Length: 100\r\n\r\n"
    with relayed(meter, head=head, to_upstream=b"b" * 100, up_length=0) as (_, server, ended):
        got = read_all(server)
    assert got == head + b"b" * 10
    assert meter.bytes_up == 10
    assert meter.cut == "the task's limit of 10 bytes sent"
    assert ended == [RelayEnd.CUT]


def test_the_clients_end_of_stream_reaches_the_server_which_can_still_answer() -> None:
    meter = Meter(EgressLimits())
    request = pattern(3_000_000)
    with relayed(meter) as (client, server, ended):
        sender(client, request)  # then the client half-closes
        received = read_all(server)  # returns only once the half-close came through
        server.sendall(hashlib.sha256(received).digest())
        server.shutdown(socket.SHUT_WR)
        answer = read_all(client)
    assert received == request
    assert answer == hashlib.sha256(request).digest()
    assert ended == [RelayEnd.DONE]


def test_the_servers_end_of_stream_reaches_the_client_which_can_still_send() -> None:
    meter = Meter(EgressLimits())
    response, more = pattern(3_000_000), pattern(2_000_000)[::-1]
    with relayed(meter) as (client, server, ended):
        sender(server, response)  # then the server half-closes
        got = read_all(client)  # returns only once the half-close came through
        sender(client, more)
        after = read_all(server)
    assert got == response and after == more
    assert ended == [RelayEnd.DONE]
