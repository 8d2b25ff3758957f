"""Engine calls have timeouts sized to the operation: an engine that accepts the
connection but answers too late is reported as slow (naming the operation and
its timeout), one whose socket is absent or refuses as not answering."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backend import classify
from orchestrator.backend.docker import INSPECT
from orchestrator.backend.engine_http import EngineClient, EngineConnectionError, EngineReadTimeout
from orchestrator.errors import EngineSlowError, EngineUnavailableError


@pytest.fixture
def silent_engine(tmp_path: Path) -> Iterator[str]:
    """A Unix socket that accepts and reads requests but never answers."""
    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_late_answer_is_a_slow_engine_named_with_its_timeout(silent_engine: str) -> None:
    client = EngineClient(silent_engine, timeout_s=30).with_timeout(0.3)
    client.api_version = "1.41"
    started = time.monotonic()
    with pytest.raises(EngineReadTimeout) as caught:
        client.inspect_container("abc")
    assert time.monotonic() - started < 3
    error = classify.unavailable(caught.value, INSPECT.describe())
    assert isinstance(error, EngineSlowError)
    assert "up but too slow: inspect (INSPECT_TIMEOUT_S = 30 s)" in str(error)


def test_an_absent_socket_is_an_engine_that_is_not_answering(tmp_path: Path) -> None:
    client = EngineClient(str(tmp_path / "missing.sock"))
    client.api_version = "1.41"
    with pytest.raises(EngineConnectionError) as caught:
        client.inspect_container("abc")
    error = classify.unavailable(caught.value, INSPECT.describe())
    assert isinstance(error, EngineUnavailableError) and not isinstance(error, EngineSlowError)
    assert "is not answering (inspect (INSPECT_TIMEOUT_S = 30 s)" in str(error)
