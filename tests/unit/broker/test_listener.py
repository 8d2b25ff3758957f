"""The broker socket serves only its own sandbox (uid plus the socket directory's own
group) and the orchestrator (file modes and a peer-credential check on accept: a
neighbour sandbox with the same uid and gid is refused even when the modes let it in), caps connections per socket without
letting idle ones lock out real requests, and closes connections that send no
request within the header timeout; the orchestrator raises its descriptor limit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from orchestrator.broker import Broker, Budget, SandboxIdentity, Upstream, make_socket_dir
from orchestrator.broker import listener as listener_module
from orchestrator.broker.upstream import model_client
from sandbox_tools import wire
from tests.conftest import REPO_ROOT
from tests.unit.broker.test_server import FakeModel, RecordingHost, make_spec

SANDBOX = SandboxIdentity(uid=1000, gid=1000)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")


def _connect_in_child(path: Path, uid: int, gid: int, out: int, groups: list[int]) -> None:
    """In a forked child: become uid:gid, ask for the spec, report what happened."""
    try:
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(str(path))
        except OSError as exc:
            verdict = f"refused {exc.errno}"
        else:
            try:
                s.sendall(b"GET /v1/spec HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = s.recv(65536)
            except OSError:  # EPIPE / ECONNRESET: the broker closed it at once
                data = b""
            verdict = "served" if data.startswith(b"HTTP/1.1 200") else "closed"
        os.write(out, verdict.encode())
    finally:
        os._exit(0)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Broker, RecordingHost]]:
    socket_dir = make_socket_dir(SANDBOX, Path(tempfile.gettempdir()))
    model = FakeModel()
    upstream_client = httpx2.AsyncClient(transport=httpx2.MockTransport(model.handler))
    host = RecordingHost()
    broker = Broker(
        socket_dir=socket_dir,
        spec=make_spec(),
        upstream=Upstream(
            model_client("http://model.test", None, http_client=upstream_client), stream=False
        ),
        host=host,
        budget=Budget(max_turns=2),
        identity=SANDBOX,
    )
    try:
        async with broker:
            yield broker, host
    finally:
        await upstream_client.aclose()
        for child in socket_dir.iterdir():
            child.unlink()
        socket_dir.rmdir()


async def connect_as(path: Path, uid: int, gid: int, groups: list[int] | None = None) -> str:
    """Connect to the broker as another user (a forked child that drops to uid:gid,
    with supplementary `groups`)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _connect_in_child(path, uid, gid, write_end, groups or [])
    os.close(write_end)
    await asyncio.to_thread(os.waitpid, pid, 0)
    with os.fdopen(read_end, "rb") as fh:
        return fh.read().decode()


@needs_root
async def test_socket_dir_and_socket_are_closed_to_other_users(served: Any) -> None:
    broker, host = served
    own = listener_module.sandbox_group(broker.socket_dir)
    assert own is not None and own in listener_module.SANDBOX_GROUPS
    dir_stat = broker.socket_dir.stat()
    sock_stat = broker.socket_path.stat()
    assert stat.S_IMODE(dir_stat.st_mode) == 0o750 and dir_stat.st_gid == own
    assert stat.S_IMODE(sock_stat.st_mode) == 0o660 and sock_stat.st_gid == own
    assert await connect_as(broker.socket_path, 1000, 1000, [own]) == "served"
    # Another user, or a neighbour sandbox (same uid and gid, not this socket's
    # group), cannot even reach the socket ...
    assert (await connect_as(broker.socket_path, 65534, 65534)).startswith("refused")
    assert (await connect_as(broker.socket_path, 1000, 1000)).startswith("refused")
    # ... and when the modes let them in, the peer check closes them.
    broker.socket_dir.chmod(0o755)
    broker.socket_path.chmod(0o666)
    assert await connect_as(broker.socket_path, 1000, 1000) == "closed"
    assert await connect_as(broker.socket_path, 4242, 1000, [own]) == "closed"
    assert await connect_as(broker.socket_path, 1000, 1000, [own]) == "served"
    assert [k for k, _ in host.notices] == ["peer_refused", "peer_refused"]
    assert "uid 1000 without group" in host.notices[0][1]
    assert "another sandbox" in host.notices[0][1]
    assert "uid 4242" in host.notices[1][1]


async def test_idle_connections_are_evicted_at_the_cap_and_reaped_after_the_timeout(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener_module, "HEADER_TIMEOUT_S", 1.5)
    broker, host = served
    cap = listener_module.MAX_CONNECTIONS_PER_SOCKET
    idle = []
    for _ in range(cap + 20):
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        await asyncio.get_running_loop().sock_connect(s, str(broker.socket_path))
        idle.append(s)
    client = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=str(broker.socket_path)),
        base_url=wire.BROKER_BASE_URL,
    )
    try:
        # A real request still gets through while the half-open ones hold the cap.
        assert (await client.get("/v1/spec")).status_code == 200
        assert broker.listener.open_connections <= cap
        assert broker.listener.evicted >= 20
        assert [k for k, _ in host.notices] == ["connection_cap"]
        await asyncio.sleep(1.5 + 2 * listener_module.REAP_INTERVAL_S)
        assert broker.listener.open_connections == 0
    finally:
        await client.aclose()
        for s in idle:
            s.close()


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    code = (
        "import resource\n"
        "from orchestrator.broker.limits import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "print(raise_open_file_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert out.stdout.strip() == "True"


async def test_busy_connections_are_capped_over_the_whole_run() -> None:
    """Every broker of a run shares one connection budget (half the open-file limit):
    sandboxes holding busy connections on many sockets can never take the
    descriptors the run's own files need; past the budget new ones are closed, yet
    every socket keeps its reserved few, so a neighbour's runner still gets in."""
    budget = listener_module.ConnectionBudget(limit=5)
    assert listener_module.ConnectionBudget.for_limit(256).limit == 128
    # Descriptors the process already holds are not the run's to give away.
    assert listener_module.ConnectionBudget.for_limit(256, in_use=56).limit == 100
    brokers, hosts, dirs, held = [], [], [], []
    model = FakeModel()
    upstream_client = httpx2.AsyncClient(transport=httpx2.MockTransport(model.handler))
    try:
        for _ in range(3):
            socket_dir = make_socket_dir(
                SandboxIdentity(os.getuid(), os.getgid()), Path(tempfile.gettempdir())
            )
            host = RecordingHost()
            broker = Broker(
                socket_dir=socket_dir,
                spec=make_spec(),
                upstream=Upstream(model_client("http://m.test", None, http_client=upstream_client)),
                host=host,
                budget=Budget(max_turns=2),
                connections=budget,
            )
            await broker.start()
            brokers.append(broker)
            hosts.append(host)
            dirs.append(socket_dir)
        reserve = listener_module.RESERVED_CONNECTIONS_PER_SOCKET

        async def busy(broker: Broker) -> None:  # holds an alive request open
            reader, writer = await asyncio.open_unix_connection(str(broker.socket_path))
            with contextlib.suppress(ConnectionError):
                writer.write(f"GET {wire.ALIVE_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                await writer.drain()
            held.append((reader, writer))
            await asyncio.sleep(0.05)

        async def closed(conns: list[Any]) -> int:
            count = 0
            for reader, _ in conns:
                try:
                    got = await asyncio.wait_for(reader.read(1), 0.2)
                    count += got == b""
                except ConnectionResetError:
                    count += 1
                except TimeoutError:
                    pass  # still open and waiting: served
            return count

        for i in range(24):  # two sandboxes fill the run's budget, and more
            await busy(brokers[i % 2])
        assert budget.open == 2 * reserve  # the budget (5), then each one's reserve
        assert await closed(held) == 24 - 2 * reserve
        notices = [k for host in hosts for k, _ in host.notices]
        assert "run_connection_cap" in notices
        await busy(brokers[2])  # a neighbour's runner: its own socket's reserve
        assert await closed(held[-1:]) == 0
        assert budget.open == 2 * reserve + 1
        assert not hosts[2].notices
    finally:
        for _, writer in held:
            writer.close()
        for broker in brokers:
            await broker.close()
        await upstream_client.aclose()
        for socket_dir in dirs:
            for child in socket_dir.iterdir():
                child.unlink()
            socket_dir.rmdir()
    assert budget.open == 0


async def test_a_connection_accepted_as_the_listener_closes_is_closed_not_leaked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing the listener cancels its accept. A connection the kernel handed over at
    that very moment (the accept done, its task not yet resumed) was dropped unclosed:
    a leaked descriptor, and a client left hanging. The moment is made here on
    purpose: the accept completes and the task is cancelled in the same callback."""
    loop = asyncio.get_running_loop()
    path = tmp_path / "s.sock"

    async def nothing(kind: str, message: str) -> None:
        return None

    listener = listener_module.Listener(
        path=path, protocol_factory=asyncio.Protocol, identity=None, notice=nothing
    )

    def accept_as_the_close_comes(sock: socket.socket) -> asyncio.Future[Any]:
        accepted: asyncio.Future[Any] = loop.create_future()

        def now() -> None:
            accepted.set_result(sock.accept())
            (task,) = [t for t in listener._tasks if "accept" in t.get_name()]
            task.cancel()

        loop.call_soon(now)
        return accepted

    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    await listener.start()
    try:
        monkeypatch.setattr(loop, "sock_accept", accept_as_the_close_comes)
        client.connect(str(path))  # waiting in the backlog before the accept below
        await asyncio.sleep(0)  # the accept loop's next turn, patched
        await listener.close()
        monkeypatch.undo()
        # The listener closed what it had accepted: the client sees its end at once.
        assert await asyncio.to_thread(client.recv, 1) == b""
    finally:
        client.close()
