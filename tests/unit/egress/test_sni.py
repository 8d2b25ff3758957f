"""SNI parsing: a real ClientHello gives its server name; truncated, oversized,
split, duplicated or multi-name ClientHellos are refused, never guessed at."""

from __future__ import annotations

import ssl
import struct

import pytest

from orchestrator.egress.sni import ClientHelloError, parse_client_hello, record_length


def real_hello(server_name: str | None) -> bytes:
    """The first record Python's own TLS client sends."""
    ctx = ssl.create_default_context()
    if server_name is None:
        ctx.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        conn.do_handshake()
    return outgoing.read()


def hello_with_extensions(extensions: bytes) -> bytes:
    body = b"\x03\x03" + b"\x00" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(extensions)) + extensions
    handshake = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack(">H", len(handshake)) + handshake


def sni_extension(*names: bytes) -> bytes:
    entries = b"".join(b"\x00" + struct.pack(">H", len(n)) + n for n in names)
    data = struct.pack(">H", len(entries)) + entries
    return b"\x00\x00" + struct.pack(">H", len(data)) + data


def test_real_client_hello_names_its_server() -> None:
    assert parse_client_hello(real_hello("pypi.org")).server_name == "pypi.org"


def test_real_client_hello_without_sni() -> None:
    assert parse_client_hello(real_hello(None)).server_name is None


def test_hand_made_hello_round_trips() -> None:
    assert parse_client_hello(hello_with_extensions(sni_extension(b"Example.COM"))).server_name == (
        "example.com"
    )


@pytest.mark.parametrize("cut", [1, 5, 10, 43, 60])
def test_truncated_hello_is_refused(cut: int) -> None:
    record = real_hello("pypi.org")
    with pytest.raises(ClientHelloError):
        parse_client_hello(record[:-cut])


def test_oversized_record_is_refused_from_its_header() -> None:
    with pytest.raises(ClientHelloError, match="record of"):
        record_length(b"\x16\x03\x01\xff\xff")


def test_not_tls_is_refused() -> None:
    with pytest.raises(ClientHelloError, match="not a TLS handshake"):
        record_length(b"GET / HTTP/1.1\r\n")


def test_multiple_server_names_are_refused() -> None:
    record = hello_with_extensions(sni_extension(b"allowed.test", b"evil.test"))
    with pytest.raises(ClientHelloError, match="2 server names"):
        parse_client_hello(record)


def test_duplicate_sni_extension_is_refused() -> None:
    record = hello_with_extensions(sni_extension(b"allowed.test") + sni_extension(b"evil.test"))
    with pytest.raises(ClientHelloError, match="twice"):
        parse_client_hello(record)


def test_inner_length_overrunning_the_record_is_refused() -> None:
    ext = b"\x00\x00\x00\x05\x00\xff\x00\x00\x01"  # server name list claims 255 bytes
    with pytest.raises(ClientHelloError, match="truncated"):
        parse_client_hello(hello_with_extensions(ext))


def test_hello_split_across_records_is_refused() -> None:
    record = real_hello("pypi.org")
    handshake = record[5:]
    first = b"\x16\x03\x01" + struct.pack(">H", 40) + handshake[:40]
    with pytest.raises(ClientHelloError, match="exactly one TLS record"):
        parse_client_hello(first)


def test_non_printable_server_name_is_refused() -> None:
    with pytest.raises(ClientHelloError, match="printable"):
        parse_client_hello(hello_with_extensions(sni_extension(b"a\x1b[2Jb")))


def test_a_hello_retry_request_is_told_from_a_server_hello() -> None:
    from orchestrator.egress.sni import HELLO_RETRY_RANDOM, is_hello_retry

    def server_hello(random: bytes) -> bytes:
        body = b"\x03\x03" + random + b"\x00\x13\x01\x00\x00\x00"
        handshake = b"\x02" + len(body).to_bytes(3, "big") + body
        return b"\x16\x03\x03" + struct.pack(">H", len(handshake)) + handshake

    assert is_hello_retry(server_hello(HELLO_RETRY_RANDOM)) is True
    assert is_hello_retry(server_hello(b"\x01" * 32)) is False
    with pytest.raises(ClientHelloError, match="not a ServerHello"):
        is_hello_retry(real_hello("pypi.org"))  # a ClientHello is no answer
    with pytest.raises(ClientHelloError, match="did not answer"):
        is_hello_retry(b"\x15\x03\x03\x00\x02\x02\x28")  # an alert


def test_any_record_type_only_when_asked() -> None:
    ccs = b"\x14\x03\x03\x00\x01"
    with pytest.raises(ClientHelloError, match="not a TLS handshake"):
        record_length(ccs)
    assert record_length(ccs, any_type=True) == 1
    with pytest.raises(ClientHelloError, match="not a TLS record"):
        record_length(b"GET /", any_type=True)
