"""Locks in the thin Engine API client against a fake engine on a Unix socket in the
test (no Docker): API version negotiation, the requests it sends (the same container
and host config the docker SDK would send), errors mapped by status code (404, 409,
5xx, others), connection failures and read timeouts, chunked answers, the attach
upgrade and the 8-byte-header framing of multiplexed streams, `connect_local`'s choice
of transport and its dead-engine message, and DockerBackend running on it."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator import labels as wl
from orchestrator.backend import classify, engine_http
from orchestrator.backend.base import SandboxSpec, SandboxStatus
from orchestrator.backend.connect import ENGINE_FIX, connect_local
from orchestrator.backend.docker import DockerBackend
from orchestrator.backend.engine_http import (
    Conflict,
    EngineAPIError,
    EngineClient,
    EngineConnectionError,
    EngineReadTimeout,
    NotFound,
    ServerError,
    iter_frames,
)
from orchestrator.config import Settings
from orchestrator.errors import EngineUnavailableError, WardenError

HANG = [b"__hang__"]
"""A reply that never comes: the fake engine keeps the connection open, silent."""


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def reply(
    status: int, body: Any = b"", headers: dict[str, str] | None = None, chunks: int = 0
) -> list[bytes]:
    """Raw HTTP answer pieces: JSON for non-bytes bodies; `chunks` > 0 sends it chunked."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    if not chunks:
        head.append(f"Content-Length: {len(data)}")
        return [("\r\n".join(head) + "\r\n\r\n").encode() + data]
    head.append("Transfer-Encoding: chunked")
    pieces = [("\r\n".join(head) + "\r\n\r\n").encode()]
    step = max(1, -(-len(data) // chunks))
    for start in range(0, len(data), step):
        part = data[start : start + step]
        pieces.append(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
    pieces.append(b"0\r\nTrailer: x\r\n\r\n")
    return pieces


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeEngine:
    """A scripted Docker engine: routes (method, path without /vX.Y) to raw answers."""

    path: Path
    version: str = "1.41"
    routes: dict[tuple[str, str], Callable[[Request], Iterable[bytes]]] = field(
        default_factory=dict
    )
    """Each answer is an iterable of pieces, sent apart (a generator may block between)."""
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.routes[("GET", "/_ping")] = lambda _: reply(200, b"OK", {"Api-Version": self.version})
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(16)
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            method, target, _ = lines[0].split(" ")
            headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
            while len(body) < int(headers.get("content-length", 0)):
                body += conn.recv(4096)
            path, _, query = target.partition("?")
            if path.startswith("/v"):
                path = "/" + path.split("/", 2)[2]
            request = Request(method, path, query, headers, body)
            self.requests.append(request)
            route = self.routes.get((method, path))
            pieces = route(request) if route else reply(404, {"message": f"no route {path}"})
            if pieces == HANG:
                self._stop.wait(30)
                return
            for piece in pieces:
                conn.sendall(piece)
                time.sleep(0.005)  # separate reads on the client side

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        for conn in self._open:
            conn.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[FakeEngine]:
    fake = FakeEngine(tmp_path / "docker.sock")
    yield fake
    fake.close()


@pytest.fixture
def client(engine: FakeEngine) -> EngineClient:
    return EngineClient(str(engine.path), timeout_s=2)


def test_version_is_negotiated_once_and_capped(engine: FakeEngine, client: EngineClient) -> None:
    engine.routes[("POST", "/containers/c1/start")] = lambda _: reply(204)
    client.start("c1")
    client.start({"Id": "c1"})
    paths = [r.path for r in engine.requests]
    assert paths == ["/_ping", "/containers/c1/start", "/containers/c1/start"]
    assert client.api_version == "1.41" and client.api is client
    engine.version = "1.99"
    assert EngineClient(str(engine.path)).ping() is True
    newer = EngineClient(str(engine.path))
    newer.ping()
    assert newer.api_version == "1.45"
    engine.version = "1.20"
    with pytest.raises(EngineAPIError, match=r"older than the 1\.25"):
        EngineClient(str(engine.path)).ping()


def test_container_and_host_config_match_the_sdk(engine: FakeEngine, client: EngineClient) -> None:
    import docker

    settings: dict[str, Any] = {
        "binds": ["/w:/workspace:rw"], "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"],
        "read_only": True, "tmpfs": {"/tmp": "rw,size=1"}, "shm_size": 16, "init": True,
        "mem_limit": 1 << 29, "memswap_limit": 1 << 29, "nano_cpus": 10**9, "pids_limit": 256,
        "log_config": {"type": "json-file", "config": {"max-size": "1m"}}, "runtime": None,
        "ulimits": [{"Name": "fsize", "Soft": 1 << 30, "Hard": 1 << 30}],
    }  # fmt: skip
    sdk = docker.APIClient(base_url=f"unix://{engine.path}", version="1.41")
    host = client.create_host_config(**settings)
    assert host == sdk.create_host_config(**settings)
    engine.routes[("POST", "/containers/create")] = lambda _: reply(201, {"Id": "c1"})
    options: dict[str, Any] = {
        "command": ["true"], "user": "1000:1000", "environment": {"HOME": "/tmp"},
        "labels": {"a": "b"}, "working_dir": "/workspace", "network_disabled": True,
        "host_config": host,
    }  # fmt: skip
    assert client.create_container("img", **options) == {"Id": "c1"}
    sent = engine.requests[-1].json()
    expected = sdk.create_container_config("img", **options)
    assert sent == {key: value for key, value in expected.items() if value is not None}
    sdk.close()


@pytest.mark.parametrize(
    ("status", "kind"),
    [(404, NotFound), (409, Conflict), (500, ServerError), (503, ServerError),
     (400, EngineAPIError)],
)  # fmt: skip
def test_errors_by_status(
    engine: FakeEngine, client: EngineClient, status: int, kind: type[EngineAPIError]
) -> None:
    engine.routes[("POST", "/containers/c1/kill")] = lambda _: reply(
        status, {"message": "No such container: c1"}
    )
    with pytest.raises(kind) as caught:
        client.kill("c1")
    assert type(caught.value) is kind and isinstance(caught.value, WardenError)
    assert caught.value.status_code == status == classify.status_code(caught.value)
    assert caught.value.explanation == "No such container: c1"
    assert classify.explain(caught.value) == "No such container: c1"
    assert str(status) in str(caught.value)


def test_classifier_reads_thin_errors_as_it_reads_the_sdk_ones(
    engine: FakeEngine, client: EngineClient
) -> None:
    busy = ServerError("500 …", 500, "driver busy")
    assert classify.is_transient(busy)
    assert not classify.is_transient(ServerError("500 …", 500, "No such container"))
    assert not classify.is_transient(NotFound("404 …", 404, "gone"))
    refused = EngineConnectionError("cannot connect")
    late = EngineReadTimeout("Read timed out")
    assert classify.is_connection_error(refused) and not classify.is_read_timeout(refused)
    assert classify.is_read_timeout(late) and not classify.is_connection_error(late)
    with classify.tolerate_gone():
        raise Conflict("409 …", 409, "is not running")
    with (
        pytest.raises(EngineUnavailableError, match="warden doctor --fix"),
        classify.engine_errors(),
    ):
        raise refused


def test_no_engine_is_a_connection_error(tmp_path: Path) -> None:
    with pytest.raises(EngineConnectionError, match="cannot connect to unix://"):
        EngineClient(str(tmp_path / "none.sock")).ping()


def test_silent_engine_is_a_read_timeout(engine: FakeEngine) -> None:
    engine.routes[("POST", "/containers/c1/wait")] = lambda _: HANG
    client = EngineClient(str(engine.path), timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(EngineReadTimeout, match="Read timed out"):
        client.wait("c1", timeout=0.3)
    assert time.monotonic() - started < 2
    engine.routes[("GET", "/containers/c1/json")] = lambda _: HANG
    with pytest.raises(EngineReadTimeout):
        client.inspect_container("c1")  # the client's default timeout applies
    engine.routes[("POST", "/containers/c1/attach")] = lambda _: HANG
    with pytest.raises(EngineReadTimeout):
        client.attach_socket("c1")


def test_answer_cut_short_is_a_connection_error(engine: FakeEngine, client: EngineClient) -> None:
    engine.routes[("GET", "/containers/c1/json")] = lambda _: [
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"Id"'
    ]
    with pytest.raises(EngineConnectionError, match="after 5 of 100 bytes"):
        client.inspect_container("c1")
    engine.routes[("GET", "/containers/c1/json")] = lambda _: [b"garbage\r\n\r\n"]
    with pytest.raises(EngineConnectionError, match="malformed status line"):
        client.inspect_container("c1")


def test_chunked_answers_and_query_encoding(engine: FakeEngine, client: EngineClient) -> None:
    rows = [{"Id": f"c{i}", "Names": [f"/n{i}"], "Labels": {"k": "v" * 50}} for i in range(20)]
    engine.routes[("GET", "/containers/json")] = lambda _: reply(200, rows, chunks=7)
    assert client.containers(all=True, filters={"label": ["warden.session", "a=b"]}) == rows
    query = engine.requests[-1].query
    from urllib.parse import parse_qs

    parsed = parse_qs(query)
    assert parsed["all"] == ["1"]
    assert json.loads(parsed["filters"][0]) == {"label": ["warden.session", "a=b"]}
    client.containers(filters={"label": "x=y"})
    assert json.loads(parse_qs(engine.requests[-1].query)["filters"][0]) == {"label": ["x=y"]}
    engine.routes[("DELETE", "/containers/c1")] = lambda _: reply(204)
    client.remove_container("c1", force=True, v=True)
    assert parse_qs(engine.requests[-1].query) == {"v": ["1"], "force": ["1"]}


def test_logs_are_demultiplexed_across_chunks(engine: FakeEngine, client: EngineClient) -> None:
    body = frame(1, b"hello ") + frame(2, b"oops\n") + frame(1, b"world\n" * 1000)
    engine.routes[("GET", "/containers/c1/logs")] = lambda _: reply(200, body, chunks=9)
    assert client.logs("c1", tail=50) == b"hello oops\n" + b"world\n" * 1000
    assert "tail=50" in engine.requests[-1].query


def test_attach_upgrade_keeps_bytes_sent_with_the_header(
    engine: FakeEngine, client: EngineClient
) -> None:
    big = bytes(range(256)) * 300  # one frame larger than a single recv
    stream_bytes = frame(1, b"first\n") + frame(2, b"err\n") + frame(1, big)
    head = b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
    pieces = [head + stream_bytes[:10], stream_bytes[10:4000], stream_bytes[4000:]]
    engine.routes[("POST", "/containers/c1/attach")] = lambda _: pieces
    stream = client.attach_socket("c1", params={"stdout": 1, "stderr": 1, "stream": 1})
    stream.settimeout(None)
    frames = list(iter_frames(stream.recv))
    stream.close()
    assert frames == [(1, b"first\n"), (2, b"err\n"), (1, big)]
    request = engine.requests[-1]
    assert request.headers["upgrade"] == "tcp" and "stream=1" in request.query
    engine.routes[("POST", "/containers/c2/attach")] = lambda _: reply(404, {"message": "gone"})
    with pytest.raises(NotFound, match="gone"):
        client.attach_socket("c2")


def test_close_wakes_a_blocked_reader(engine: FakeEngine, client: EngineClient) -> None:
    head = b"HTTP/1.1 101 UPGRADED\r\n\r\n"
    engine.routes[("POST", "/containers/c1/attach")] = lambda _: [head, *HANG]
    stream = client.attach_socket("c1")
    stream.settimeout(None)
    done = threading.Event()

    def drain() -> None:
        list(iter_frames(stream.recv))
        done.set()

    reader = threading.Thread(target=drain)
    reader.start()
    time.sleep(0.1)
    stream.close()
    assert done.wait(2), "reader still blocked after close"


def test_frames_cut_short_end_the_stream() -> None:
    data = frame(1, b"whole") + frame(2, b"partial")[:-3]
    pos = 0

    def recv(size: int) -> bytes:
        nonlocal pos
        chunk = data[pos : pos + min(size, 3)]  # tiny reads: headers arrive in pieces
        pos += len(chunk)
        return chunk

    assert list(iter_frames(recv)) == [(1, b"whole")]


def test_connect_local_picks_the_transport(
    engine: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thin = connect_local(environ={"DOCKER_HOST": f"unix://{engine.path}"})
    assert isinstance(thin, EngineClient) and thin.api_version == "1.41"
    assert engine_http.socket_path_from_env({}) == engine_http.DEFAULT_SOCKET
    assert engine_http.socket_path_from_env({"DOCKER_HOST": ""}) == engine_http.DEFAULT_SOCKET
    sdk_client = object()
    monkeypatch.setattr("orchestrator.backend.connect.connect", lambda timeout_s: sdk_client)
    for host in ("tcp://127.0.0.1:2376", "ssh://user@host"):
        assert connect_local(environ={"DOCKER_HOST": host}) is sdk_client


def test_connect_local_dead_engine_message(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailableError) as caught:
        connect_local(environ={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    message = str(caught.value)
    assert message.startswith("the Docker engine does not answer (cannot connect to unix://")
    assert message.endswith(f"); {ENGINE_FIX}")


def test_docker_backend_runs_on_the_thin_client(
    engine: FakeEngine, client: EngineClient, settings: Settings, workspace: Path
) -> None:
    head = b"HTTP/1.1 101 UPGRADED\r\n\r\n"
    attached = threading.Event()
    started = threading.Event()

    def attach(_: Request) -> Iterator[bytes]:
        attached.set()
        yield head
        started.wait(5)  # output only flows once the container starts
        yield frame(1, b"out\n") + frame(2, b"err\n")

    def start(_: Request) -> list[bytes]:
        assert attached.is_set(), "attach must precede start"
        started.set()
        return reply(204)

    engine.routes.update({
        ("POST", "/containers/create"): lambda _: reply(201, {"Id": "c1", "Warnings": []}),
        ("POST", "/containers/c1/attach"): attach,
        ("POST", "/containers/c1/start"): start,
        ("POST", "/containers/c1/wait"): lambda _: reply(200, {"StatusCode": 3}),
        ("GET", "/containers/c1/json"): lambda _: reply(200, {"State": {"OOMKilled": False}}),
        ("DELETE", "/containers/c1"): lambda _: reply(204),
    })  # fmt: skip
    backend = DockerBackend(client, settings)
    spec = SandboxSpec(
        image="img", command=["run"], workspace=workspace,
        warden_labels=wl.warden_labels("s1", exec="e1"),
    )  # fmt: skip
    result = backend.run(spec)
    assert (result.status, result.exit_code) == (SandboxStatus.ERROR, 3)
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    created = next(r for r in engine.requests if r.path == "/containers/create").json()
    assert created["NetworkDisabled"] is True and created["HostConfig"]["CapDrop"] == ["ALL"]
    assert created["HostConfig"]["ReadonlyRootfs"] is True and created["HostConfig"]["Init"]
    assert [r.path for r in engine.requests][-2:] == ["/containers/c1/json", "/containers/c1"]


def test_exec_path_does_not_import_the_docker_sdk(engine: FakeEngine) -> None:
    """What `warden exec` imports and calls on a local engine pulls in neither the docker
    SDK nor requests (they cost ~160 ms of start-up)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import orchestrator.cli, orchestrator.commands.exec, orchestrator.backend.docker\n"
        "from orchestrator.backend.connect import connect_local\n"
        f"client = connect_local(environ={{'DOCKER_HOST': 'unix://{engine.path}'}})\n"
        "assert type(client).__name__ == 'EngineClient', client\n"
        "print(sorted(m for m in ('docker', 'requests', 'urllib3', 'tenacity') "
        "if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False,
        cwd=Path(__file__).resolve().parents[2], timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
