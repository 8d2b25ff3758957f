"""A Docker engine that does not answer is reported clearly, from the docker SDK's own
exceptions: one that accepts the connection but answers too late is slow (naming the
operation and its timeout), a wait whose answer outlives its timeout is a deadline
(not a dead engine), and a socket that is absent or refuses is an engine that is not
answering, with the fix named. `connect` negotiates the engine's API version and
sizes the SDK's connection pools as asked."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.backend import classify
from orchestrator.backend.connect import EXECUTOR_THREADS, connect, pool_size
from orchestrator.errors import EngineSlowError, EngineUnavailableError

WAIT_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)
"""What an engine sends at once for a container wait; the body follows at the exit."""
VERSION_BODY = b'{"ApiVersion": "1.41", "Version": "20.10.24"}'
VERSION_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(VERSION_BODY)).encode()
    + b"\r\n\r\n"
    + VERSION_BODY
)


def fake_engine(path: Path, answer: bytes) -> Iterator[str]:
    """A Unix socket that reads each request, sends `answer` and then nothing more."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)
            conn.recv(65536)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"unix://{path}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def silent_engine(tmp_path: Path) -> Iterator[str]:
    yield from fake_engine(tmp_path / "silent.sock", b"")


@pytest.fixture
def waiting_engine(tmp_path: Path) -> Iterator[str]:
    yield from fake_engine(tmp_path / "waiting.sock", WAIT_HEAD)


SDK_LEAKS_FAILED_CONNECTS = pytest.mark.filterwarnings("ignore::ResourceWarning")
"""docker 7.1 does not close the socket of a failed Unix-socket connect (its
`UnixHTTPConnection.connect`); the tests that make one collect it themselves."""


@pytest.fixture
def versioned_engine(tmp_path: Path) -> Iterator[str]:
    yield from fake_engine(tmp_path / "versioned.sock", VERSION_ANSWER)


def api_client(base_url: str) -> docker.APIClient:
    return docker.APIClient(base_url=base_url, version="1.41", timeout=1)


def test_a_late_answer_is_a_slow_engine_named_with_its_timeout(silent_engine: str) -> None:
    api = api_client(silent_engine)
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as caught:
            api.inspect_container("abc")
    finally:
        api.close()
    assert time.monotonic() - started < 5
    assert classify.is_transient(caught.value)
    error = classify.unavailable(caught.value, "inspect (timeout 1 s)")
    assert isinstance(error, EngineSlowError)
    assert "up but too slow: inspect (timeout 1 s)" in str(error)
    assert "--max-concurrent" in str(error)


def test_a_wait_past_its_timeout_is_a_deadline_not_a_dead_engine(waiting_engine: str) -> None:
    api = api_client(waiting_engine)
    try:
        with pytest.raises(Exception) as caught:
            api.wait("abc", timeout=1)
    finally:
        api.close()
    assert classify.is_read_timeout(caught.value)
    assert not classify.is_connection_error(caught.value)


@SDK_LEAKS_FAILED_CONNECTS
def test_an_absent_socket_is_an_engine_that_is_not_answering(tmp_path: Path) -> None:
    api = api_client(f"unix://{tmp_path / 'missing.sock'}")
    try:
        with pytest.raises(Exception) as caught:
            api.inspect_container("abc")
    finally:
        api.close()
    assert classify.is_connection_error(caught.value) and classify.is_transient(caught.value)
    error = classify.unavailable(caught.value, "inspect (timeout 1 s)")
    assert isinstance(error, EngineUnavailableError) and not isinstance(error, EngineSlowError)
    assert "is not answering (inspect (timeout 1 s)" in str(error)
    assert "warden doctor --fix" in str(error)
    del caught
    gc.collect()


@SDK_LEAKS_FAILED_CONNECTS
def test_connect_names_the_fix_when_the_engine_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'missing.sock'}")
    with pytest.raises(EngineUnavailableError, match="warden doctor --fix") as caught:
        connect(timeout_s=1)
    assert f"no answer on {tmp_path / 'missing.sock'}" in str(caught.value)
    assert "Error while fetching" not in str(caught.value)
    del caught
    gc.collect()


def test_connect_sizes_the_pools_and_speaks_the_engines_api_version(
    versioned_engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", versioned_engine)
    client = connect(timeout_s=5, max_pool_size=pool_size(100))
    try:
        api = client.api
        assert api.api_version == "1.41"  # negotiated: the one round trip connect makes
        assert api.timeout == 5
        assert api.get_adapter(api.base_url).max_pool_size == 100 + EXECUTOR_THREADS
    finally:
        client.close()


@pytest.mark.parametrize("host", ["tcp://docker:2375", "ssh://user@build-host", "npipe:////./pipe/x"])
def test_a_remote_engine_is_refused_before_any_connection_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """A docker:dind service or any remote engine would mount its own paths, not the
    workspace and socket warden shares: refused up front, with what to do instead."""
    from orchestrator.backend.connect import connect
    from orchestrator.errors import EngineUnavailableError

    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(EngineUnavailableError, match=r"remote engine.*unset DOCKER_HOST"):
        connect()
