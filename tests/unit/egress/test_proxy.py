"""The egress proxy over real sockets on 127.0.0.1 (no Docker): the in-container
forwarder relays to the proxy's Unix socket; allowed hosts work over HTTP and
HTTPS, and denied hosts, IP literals, private resolutions, SNI mismatches, unknown
hosts in dontAsk, and byte caps are refused with a one-line reason."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.egress.background import EventRecorder
from orchestrator.egress.limits import EgressLimits
from orchestrator.egress.resolver import StaticResolver
from orchestrator.egress.rules import RuleSet, parse_rule
from orchestrator.egress.service import EgressService, TaskEgress
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.runtime.gate import PolicyGate
from sandbox_tools import egress_forward
from tests.egress_support import LocalCA, make_ca, upstream


@dataclass
class FakeTask:
    task_id: str = "sa_test"
    parent_id: str | None = None
    run_id: str = "run_test"
    trace_id: str = ""
    description: str = "test"

    @property
    def agent_type(self) -> str:
        return "general-purpose"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return make_ca(tmp_path_factory.mktemp("ca"), ["allowed.test", "other.test"])


@pytest.fixture(scope="module")
def servers(ca: LocalCA) -> Iterator[tuple[int, int]]:
    with upstream() as http_port, upstream(ca) as https_port:
        yield http_port, https_port


def service(
    allow: list[str], deny: Sequence[str] = (), mode: str = "dontAsk", **kw: Any
) -> EgressService:
    rules = [parse_rule(d, "allow", "test", "test") for d in allow]
    rules += [parse_rule(d, "deny", "test", "test") for d in deny]
    resolver = StaticResolver(
        {"allowed.test": "127.0.0.1", "other.test": "127.0.0.1", "private.test": "10.0.0.7",
         "meta.test": "169.254.169.254", "denied.test": "127.0.0.1", "unknown.test": "127.0.0.1"}
    )  # fmt: skip
    return EgressService(rules=RuleSet(tuple(rules)), mode=mode, resolver=resolver, **kw)


@dataclass
class Proxied:
    port: int
    events: EventRecorder
    service: EgressService
    egress: TaskEgress


@pytest.fixture
async def proxied(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Proxied]:
    svc: EgressService = request.param() if callable(request.param) else request.param
    events = EventRecorder()
    svc.events = events
    egress = await svc.open(FakeTask(), None, tmp_path)
    assert egress is not None
    server = forwarding(tmp_path)
    port = server.getsockname()[1]
    try:
        yield Proxied(port, events, svc, egress)
    finally:
        server.close()
        await egress.close()


def forwarding(tmp_path: Path) -> socket.socket:
    """The in-container forwarder's fallback, serving on a loopback port here: each
    client relayed to the proxy's socket in `tmp_path` (the caller closes it)."""
    server = egress_forward.listen()
    threading.Thread(
        target=egress_forward.serve, args=(server, str(tmp_path / "egress.sock")), daemon=True
    ).start()
    return server


def fetch(proxy_port: int, url: str, ca: LocalCA | None = None) -> tuple[int, str, str]:
    proxy = f"http://127.0.0.1:{proxy_port}"
    handlers: list[urllib.request.BaseHandler] = [
        urllib.request.ProxyHandler({"http": proxy, "https": proxy})
    ]
    if ca is not None:
        handlers.append(
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca.ca_file))
        )
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=20) as resp:
            return resp.status, resp.read().decode(), ""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("X-Warden-Egress", "")


ALLOW = service(["allowed.test", "private.test", "meta.test"], deny=["denied.test"])


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_allowed_host_over_http_and_https(
    proxied: Proxied, servers: tuple[int, int], ca: LocalCA
) -> None:
    http_port, https_port = servers
    status, body, _ = await asyncio.to_thread(
        fetch, proxied.port, f"http://allowed.test:{http_port}/hello"
    )
    assert (status, body) == (200, f"hello from allowed.test:{http_port}\n")
    status, body, _ = await asyncio.to_thread(
        fetch, proxied.port, f"https://allowed.test:{https_port}/hello", ca
    )
    assert status == 200 and body.startswith("hello from allowed.test")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://denied.test:{http}/hello", "denied by the rule denied.test"),
        ("http://127.0.0.1:{http}/hello", "is an IP address"),
        ("http://private.test:{http}/hello", "resolves to 10.0.0.7, a private address"),
        ("http://meta.test:{http}/hello", "link-local address (cloud metadata"),
        ("http://unknown.test:{http}/hello", "mode dontAsk denies it"),
    ],
)
@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_refusals_are_403_with_a_reason(
    proxied: Proxied, servers: tuple[int, int], url: str, expected: str
) -> None:
    status, body, header = await asyncio.to_thread(fetch, proxied.port, url.format(http=servers[0]))
    assert status == 403
    assert expected in body and expected in header
    assert body.startswith("warden egress: ")


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_an_allowed_host_that_refuses_the_connection_is_502_with_a_reason(
    proxied: Proxied,
) -> None:
    # Bound but never listened on, and held: refused, and no other process can take it.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        closed_port = held.getsockname()[1]
        status, body, header = await asyncio.to_thread(
            fetch, proxied.port, f"http://allowed.test:{closed_port}/hello"
        )
    assert status == 502
    expected = f"could not connect to allowed.test:{closed_port} (Connection refused)"
    assert expected in body and expected in header
    status, _, _ = await asyncio.to_thread(fetch, proxied.port, "http://allowed.test:1/hello")
    assert status == 502  # and the proxy goes on serving


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_sni_differing_from_connect_host_is_refused(
    proxied: Proxied, servers: tuple[int, int], ca: LocalCA
) -> None:
    https_port = servers[1]

    def tunnel() -> str:
        with socket.create_connection(("127.0.0.1", proxied.port), timeout=10) as raw:
            raw.sendall(
                f"CONNECT allowed.test:{https_port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode()
            )
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")
            ctx = ssl.create_default_context(cafile=ca.ca_file)
            try:
                with ctx.wrap_socket(raw, server_hostname="other.test"):
                    return "handshake completed"
            except ssl.SSLError as exc:
                return str(exc)

    outcome = await asyncio.to_thread(tunnel)
    assert "UNRECOGNIZED_NAME" in outcome.upper()
    denied = [d for k, d in proxied.events.events if k == "egress_denied"]
    assert any("differs from the CONNECT host" in str(d["reason"]) for d in denied)


class ScriptedApprover:
    """Answers each question in turn from a script, and keeps the questions."""

    def __init__(self, *answers: tuple[str, str]) -> None:
        self.answers = list(answers)
        self.questions: list[ApprovalQuestion] = []

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        self.questions.append(q)
        behavior, scope = self.answers.pop(0)
        return ApprovalAnswer(behavior=behavior, scope=scope, decided_by="scripted")  # type: ignore[arg-type]


def asking(tmp: Path, *answers: tuple[str, str]) -> tuple[EgressService, ScriptedApprover]:
    from orchestrator.permissions import EffectivePolicy, HookSet

    approver = ScriptedApprover(*answers)
    gate = PolicyGate(
        policy=EffectivePolicy(), hooks=HookSet((), ()), workspace_host=tmp, approver=approver
    )
    svc = service(["allowed.test"], mode="default", asker=gate, workspace=tmp)
    return svc, approver


async def test_unknown_host_asks_the_approver_and_its_answers_hold(
    tmp_path: Path, servers: tuple[int, int]
) -> None:
    svc, approver = asking(tmp_path, ("deny", "once"), ("allow", "session"), ("allow", "always"))
    svc.events = EventRecorder()
    egress = await svc.open(FakeTask(), None, tmp_path)
    assert egress is not None
    server = forwarding(tmp_path)
    port = server.getsockname()[1]
    url = f"http://unknown.test:{servers[0]}/hello"
    try:
        status, body, _ = await asyncio.to_thread(fetch, port, url)
        assert status == 403 and "denied by scripted" in body
        q = approver.questions[0]
        assert (q.tool_name, q.tool_input) == (
            "Network",
            {"host": "unknown.test", "port": servers[0]},
        )
        assert q.task_id == "sa_test" and "unknown.test" in q.reason
        assert (await asyncio.to_thread(fetch, port, url))[0] == 200  # allowed for the run
        assert (await asyncio.to_thread(fetch, port, url))[0] == 200  # not asked again
        assert len(approver.questions) == 2
        other = f"http://other.test:{servers[0]}/hello"
        assert (await asyncio.to_thread(fetch, port, other))[0] == 200  # always
        settings = json.loads((tmp_path / ".claude" / "settings.local.json").read_text())
        assert settings["sandbox"]["network"]["allowedDomains"] == ["other.test"]
    finally:
        server.close()
        await egress.close()


class RecordingAsker:
    """Any `permissions.approvers.Asker` will do: egress needs nothing else of the gate."""

    def __init__(self, behavior: str) -> None:
        self.behavior = behavior
        self.asked: list[tuple[str, str, object]] = []

    async def ask_about(self, task: object, **question: object) -> ApprovalAnswer:
        asked = (getattr(task, "task_id", ""), str(question["tool_name"]), question["tool_input"])
        self.asked.append(asked)
        return ApprovalAnswer(behavior=self.behavior, channel="test")  # type: ignore[arg-type]


@pytest.mark.parametrize("behavior", ["allow", "deny"])
async def test_an_unknown_host_is_asked_through_the_runs_asker(
    tmp_path: Path, servers: tuple[int, int], behavior: str
) -> None:
    asker = RecordingAsker(behavior)
    svc = service(["allowed.test"], mode="default", asker=asker)
    svc.events = EventRecorder()
    egress = await svc.open(FakeTask(), None, tmp_path)
    assert egress is not None
    server = forwarding(tmp_path)
    port = server.getsockname()[1]
    try:
        status, _, _ = await asyncio.to_thread(
            fetch, port, f"http://unknown.test:{servers[0]}/hello"
        )
    finally:
        server.close()
        await egress.close()
    assert asker.asked == [("sa_test", "Network", {"host": "unknown.test", "port": servers[0]})]
    assert status == (200 if behavior == "allow" else 403)


@pytest.mark.parametrize(
    "proxied", [lambda: service(["allowed.test"], mode="default")], indirect=True
)
async def test_unknown_host_without_an_approver_is_denied_in_default_mode(
    proxied: Proxied, servers: tuple[int, int]
) -> None:
    status, body, _ = await asyncio.to_thread(
        fetch, proxied.port, f"http://unknown.test:{servers[0]}/hello"
    )
    assert status == 403 and "denied by no approver" in body


@pytest.mark.parametrize(
    "proxied",
    [lambda: service(["allowed.test"], limits=EgressLimits(max_bytes_down=200_000))],
    indirect=True,
)
async def test_byte_cap_stops_a_large_download(proxied: Proxied, servers: tuple[int, int]) -> None:
    def download() -> int:
        proxy = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxied.port}"})
        got = 0
        try:
            with urllib.request.build_opener(proxy).open(
                f"http://allowed.test:{servers[0]}/bytes/5000000", timeout=20
            ) as resp:
                while chunk := resp.read(65536):
                    got += len(chunk)
        except Exception:
            pass
        return got

    got = await asyncio.to_thread(download)
    assert got < 200_000

    def notices() -> list[dict[str, object]]:
        return [d for k, d in proxied.events.events if k == "broker_notice"]

    # The client sees the cut as soon as the relay thread ends the connection; the
    # notice follows once the proxy's loop has heard of it.
    async with asyncio.timeout(10):
        while not notices():
            await asyncio.sleep(0.01)
    summary = notices()[0]
    assert "200000 bytes received" in str(summary["message"])


def test_plain_http_is_sent_in_origin_form_with_the_decided_host() -> None:
    from orchestrator.egress.http_head import parse_request_head

    head = (
        b"GET http://allowed.test:8080/a?b=1 HTTP/1.1\r\nHost: other.test\r\n"
        b"Proxy-Authorization: x\r\nAccept: */*\r\n\r\n"
    )
    request = parse_request_head(head)
    assert (request.method, request.host, request.port, request.body_bytes) == (
        "GET",
        "allowed.test",
        8080,
        0,
    )
    assert request.upstream_head == (
        b"GET /a?b=1 HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\n"
        b"Connection: close\r\n\r\n"
    )


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_a_request_pipelined_behind_an_allowed_one_never_reaches_the_upstream(
    proxied: Proxied,
) -> None:
    """Plain HTTP carries one decided request: its announced body goes up, a second
    request smuggled behind it (another Host on the same address) does not."""
    received = bytearray()
    answered = asyncio.Event()

    async def upstream_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.readuntil(b"\r\n\r\n"))
        received.extend(await reader.readexactly(5))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        with contextlib.suppress(TimeoutError):  # anything more the proxy sends
            received.extend(await asyncio.wait_for(reader.read(4096), 1.0))
        writer.close()
        answered.set()

    server = await asyncio.start_server(upstream_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    smuggled = b"GET /admin HTTP/1.1\r\nHost: denied.test\r\n\r\n"

    def client() -> bytes:
        with socket.create_connection(("127.0.0.1", proxied.port), timeout=20) as sock:
            sock.sendall(
                f"POST http://allowed.test:{port}/up HTTP/1.1\r\nHost: allowed.test\r\n"
                "Content-Length: 5\r\n\r\nhello".encode()
                + smuggled
            )
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
            return reply

    try:
        reply = await asyncio.to_thread(client)
        await asyncio.wait_for(answered.wait(), 20)
    finally:
        server.close()
    assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"ok")
    assert received.startswith(b"POST /up HTTP/1.1\r\n") and received.endswith(b"hello")
    assert b"denied.test" not in received


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ("Transfer-Encoding: chunked\r\n", "411"),
        ("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "411"),
        ("Content-Length: 5\r\nContent-Length: 6\r\n", "400"),
        ("Content-Length: 5\r\nContent-Length: 5\r\n", "400"),
        ("Content-Length: 5, 5\r\n", "400"),
        ("Content-Length: -1\r\n", "400"),
        ("X-A: 1\n\nGET / HTTP/1.1\nHost: denied.test\r\n", "400"),
        ("X-A: 1\rHost: denied.test\r\n", "400"),
        ("X-A: 1\r\n Host: denied.test\r\n", "400"),
        ("X-A : 1\r\n", "400"),
        ("X-A: \x001\r\n", "400"),
    ],
)
def test_request_bodies_of_unknown_length_are_refused(headers: str, status: str) -> None:
    from orchestrator.egress.http_head import HeadRefused, parse_request_head

    head = f"POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n{headers}\r\n".encode()
    with pytest.raises(HeadRefused) as refused:
        parse_request_head(head)
    assert str(refused.value.status) == status


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_closing_a_proxy_with_open_tunnels_is_quiet(
    proxied: Proxied,
    servers: tuple[int, int],
    ca: LocalCA,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A task ends while its sandbox holds tunnels open (and a download runs): the
    proxy closes them; nothing is printed on the user's terminal."""
    http_port, https_port = servers
    caplog.set_level(logging.DEBUG)
    opened: list[socket.socket] = []

    def open_tunnels() -> None:
        ctx = ssl.create_default_context(cafile=ca.ca_file)
        for _ in range(3):
            raw = socket.create_connection(("127.0.0.1", proxied.port), timeout=10)
            raw.sendall(
                f"CONNECT allowed.test:{https_port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode()
            )
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")
            opened.append(ctx.wrap_socket(raw, server_hostname="allowed.test"))
        raw = socket.create_connection(("127.0.0.1", proxied.port), timeout=10)
        raw.sendall(
            f"GET http://allowed.test:{http_port}/bytes/500000000 HTTP/1.1\r\n"
            "Host: allowed.test\r\n\r\n".encode()
        )
        assert raw.recv(65536).startswith(b"HTTP/1.1 200")
        opened.append(raw)

    await asyncio.to_thread(open_tunnels)
    await proxied.egress.close()  # the task ends (the fixture's close repeats it)

    def ended(sock: socket.socket) -> bool:
        sock.settimeout(10)
        try:
            while sock.recv(65536):
                pass
        except (OSError, ssl.SSLError):
            pass
        return True

    assert all(await asyncio.to_thread(lambda: [ended(s) for s in opened]))
    for s in opened:
        s.close()
    await asyncio.sleep(0.2)
    gc.collect()
    await asyncio.sleep(0.1)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, [r.getMessage() for r in loud]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Task exception" not in err, err


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_a_passed_descriptor_that_is_not_a_listening_tcp_socket_is_refused(
    proxied: Proxied, tmp_path: Path
) -> None:
    """The forwarder passes its listening socket; anything else a sandbox passes (a
    pipe, a Unix socket, a connected TCP socket, whose blocking flag the sandbox could
    clear under the proxy) is closed unused, whatever marker it comes with."""
    import array
    import os

    def pass_fd(marker: bytes, fd: int) -> bytes:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(tmp_path / "egress.sock"))
            conn.sendmsg(
                [marker], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            )
            conn.settimeout(10)
            return conn.recv(4096)

    read_end, write_end = os.pipe()
    a, b = socket.socketpair()
    server = egress_forward.listen()
    client = socket.create_connection(server.getsockname())
    try:
        for marker in (b"\0", egress_forward.LISTENER):
            assert await asyncio.to_thread(pass_fd, marker, write_end) == b""
            assert await asyncio.to_thread(pass_fd, marker, a.fileno()) == b""
            assert await asyncio.to_thread(pass_fd, marker, client.fileno()) == b""
        peer, _ = server.accept()
        with peer:
            peer.setblocking(False)
            with pytest.raises(BlockingIOError):
                peer.recv(10)  # the proxy never answered on the passed connection
        b.setblocking(False)
        with pytest.raises(BlockingIOError):
            b.recv(10)  # nothing was written to the passed socket
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        for sock in (a, b, server, client):
            sock.close()


@pytest.mark.parametrize(
    "proxied",
    [lambda: service(["allowed.test"], limits=EgressLimits(max_connections=1))],
    indirect=True,
)
async def test_a_connection_over_the_cap_gets_429_through_the_forwarder(
    proxied: Proxied, servers: tuple[int, int]
) -> None:
    url = f"http://allowed.test:{servers[0]}/hello"
    assert (await asyncio.to_thread(fetch, proxied.port, url))[0] == 200
    status, body, _ = await asyncio.to_thread(fetch, proxied.port, url)
    assert status == 429 and "connection limit (1)" in body


async def test_parallel_connections_to_a_new_host_share_one_question(
    tmp_path: Path, servers: tuple[int, int]
) -> None:
    class SlowApprover(ScriptedApprover):
        async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
            await asyncio.sleep(0.5)
            return await super().approve(q)

    svc, _ = asking(tmp_path)
    approver = SlowApprover(("allow", "session"), ("deny", "once"))
    assert isinstance(svc.asker, PolicyGate)  # the run's
    svc.asker.approver = approver
    svc.events = EventRecorder()
    egress = await svc.open(FakeTask(), None, tmp_path)
    assert egress is not None
    server = forwarding(tmp_path)
    port = server.getsockname()[1]
    url = f"http://unknown.test:{servers[0]}/hello"
    try:
        results = await asyncio.gather(*(asyncio.to_thread(fetch, port, url) for _ in range(20)))
        assert [r[0] for r in results] == [200] * 20
        assert len(approver.questions) == 1
        assert (await asyncio.to_thread(fetch, port, url))[0] == 200  # for the run
        assert len(approver.questions) == 1
    finally:
        server.close()
        await egress.close()


def _ask_as(path: Path, uid: int, groups: list[int], request: bytes) -> bytes:
    """What a forked child running as uid:uid with `groups` gets back for `request`."""
    import os
    import socket

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        answer = b""
        try:
            os.close(read_end)
            os.setgroups(groups)
            os.setgid(uid)
            os.setuid(uid)
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(str(path))
            s.sendall(request)
            answer = s.recv(64)
        except OSError as exc:
            answer = type(exc).__name__.encode()
        finally:
            os.write(write_end, answer or b"closed")
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as fh:
        return fh.read()


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="switching uids needs root")
async def test_a_neighbour_without_the_sockets_own_group_is_refused(
    servers: tuple[int, int],
) -> None:
    """Same uid as the sandbox, even with the modes loosened: without the socket
    directory's own group the proxy refuses it; the sandbox itself is served."""
    import shutil
    import tempfile

    from orchestrator.broker.listener import SandboxIdentity, make_socket_dir, sandbox_group

    # Under the temp dir, which uid 1000 may pass through (pytest's tmp_path it may not).
    socket_dir = make_socket_dir(SandboxIdentity(1000, 1000), Path(tempfile.gettempdir()))
    own = sandbox_group(socket_dir)
    assert own is not None
    svc = service(["allowed.test"], sandbox_uid=1000)
    events = EventRecorder()
    svc.events = events
    egress = await svc.open(FakeTask(), None, socket_dir)
    assert egress is not None
    path = socket_dir / "egress.sock"
    socket_dir.chmod(0o755)
    path.chmod(0o666)
    request = f"GET http://allowed.test:{servers[0]}/hello HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
    try:
        neighbour = await asyncio.to_thread(_ask_as, path, 1000, [], request.encode())
        own_sandbox = await asyncio.to_thread(_ask_as, path, 1000, [own], request.encode())
    finally:
        await egress.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
    assert neighbour in (b"closed", b"ConnectionResetError", b"BrokenPipeError"), neighbour
    assert own_sandbox.startswith(b"HTTP/1.1 200"), own_sandbox
    refused = [d for k, d in events.events if k == "broker_notice"]
    assert any("without group" in str(d.get("message")) for d in refused), events.events


class HeldStore:
    """A run store whose audit writes wait until released (or fail), to see what
    the proxy does meanwhile."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.writing = threading.Event()
        self.release = threading.Event()
        self.records: list[object] = []

    def record_audit(self, record: object) -> int:
        self.writing.set()
        if self.fail:
            from orchestrator.errors import StoreError

            raise StoreError("cannot make the state store durable (test)")
        assert self.release.wait(60)
        self.records.append(record)
        return len(self.records)


def _one_request(proxy_port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=60) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


async def test_no_byte_goes_upstream_before_the_connections_audit_record_is_written(
    tmp_path: Path,
) -> None:
    """With a run store (`warden run`), an allowed plain-http connection's record is
    written (durably: `record_audit` returns once it is on disk) before the request
    head leaves for the upstream; the record names the host, port and method."""
    store = HeldStore()
    svc = service(["allowed.test"], store=store)
    svc.events = EventRecorder()
    egress = await svc.open(FakeTask(), None, tmp_path)
    assert egress is not None
    forwarder = forwarding(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as origin:
        port = origin.getsockname()[1]
        request = f"GET http://allowed.test:{port}/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
        try:
            asked = asyncio.create_task(
                asyncio.to_thread(_one_request, forwarder.getsockname()[1], request.encode())
            )
            assert await asyncio.to_thread(store.writing.wait, 60)
            origin.settimeout(60)
            upstream, _ = await asyncio.to_thread(origin.accept)  # connected, nothing sent
            with upstream:
                upstream.setblocking(False)
                with pytest.raises(BlockingIOError):
                    upstream.recv(1)
                store.release.set()
                upstream.setblocking(True)
                upstream.settimeout(60)
                head = await asyncio.to_thread(upstream.recv, 65536)
                assert head.startswith(b"GET /x HTTP/1.1\r\n")
                upstream.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                upstream.shutdown(socket.SHUT_WR)
                assert (await asyncio.wait_for(asked, 60)).endswith(b"\r\n\r\nok")
        finally:
            store.release.set()
            forwarder.close()
            await egress.close()
    [record] = store.records
    assert record.tool_input == {"host": "allowed.test", "port": port, "method": "GET"}  # type: ignore[attr-defined]
    assert record.final == "allow"  # type: ignore[attr-defined]
    summary = egress.meter.destination("allowed.test", port)
    assert summary.connections == 1


async def test_a_connection_whose_audit_record_cannot_be_written_is_closed_unsent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that cannot make the record durable: the client's connection is
    closed with nothing sent upstream, the error is logged, and the connection is
    not counted as made."""
    store = HeldStore(fail=True)
    svc = service(["allowed.test"], store=store)
    svc.events = EventRecorder()
    egress = await svc.open(FakeTask(), None, tmp_path)
    assert egress is not None
    forwarder = forwarding(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as origin:
        port = origin.getsockname()[1]
        request = f"GET http://allowed.test:{port}/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
        try:
            answer = await asyncio.to_thread(
                _one_request, forwarder.getsockname()[1], request.encode()
            )
            origin.settimeout(60)
            upstream, _ = await asyncio.to_thread(origin.accept)
            with upstream:
                upstream.settimeout(60)
                sent = await asyncio.to_thread(upstream.recv, 65536)
        finally:
            forwarder.close()
            await egress.close()
    assert answer == b"" and sent == b""
    assert any("closed unsent" in r.getMessage() for r in caplog.records), caplog.records
    assert egress.meter.destination("allowed.test", port).connections == 0


def _pass_listener_as(path: Path, uid: int, groups: list[int]) -> bytes:
    """Whether a forked child running as uid:uid with `groups` got its listening
    socket taken by the proxy (b"taken" / b"refused")."""
    import os

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        answer = b"refused"
        try:
            os.close(read_end)
            os.setgroups(groups)
            os.setgid(uid)
            os.setuid(uid)
            server = egress_forward.listen()
            if egress_forward.pass_listener(server, str(path)):
                answer = b"taken"
        finally:
            os.write(write_end, answer)
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as fh:
        return fh.read()


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="switching uids needs root")
async def test_only_the_sandbox_itself_may_pass_a_listening_socket(
    servers: tuple[int, int],
) -> None:
    """A listening socket is taken only over a connection that passes the same peer
    checks as a handed-over one: a neighbour of the sandbox's uid without the socket
    directory's own group is refused (and reported); the sandbox's is taken, and the
    proxy serves connections on it with the task's rules."""
    import shutil
    import tempfile

    from orchestrator.broker.listener import SandboxIdentity, make_socket_dir, sandbox_group

    socket_dir = make_socket_dir(SandboxIdentity(1000, 1000), Path(tempfile.gettempdir()))
    own = sandbox_group(socket_dir)
    assert own is not None
    svc = service(["allowed.test"], sandbox_uid=1000)
    events = EventRecorder()
    svc.events = events
    egress = await svc.open(FakeTask(), None, socket_dir)
    assert egress is not None
    path = socket_dir / "egress.sock"
    socket_dir.chmod(0o755)
    path.chmod(0o666)
    try:
        neighbour = await asyncio.to_thread(_pass_listener_as, path, 1000, [])
        own_sandbox = await asyncio.to_thread(_pass_listener_as, path, 1000, [own])
        mine = egress_forward.listen()
        assert await asyncio.to_thread(egress_forward.pass_listener, mine, str(path))
        port = mine.getsockname()[1]
        mine.close()  # the proxy holds it now; nothing serves it here
        allowed = await asyncio.to_thread(fetch, port, f"http://allowed.test:{servers[0]}/hello")
        denied = await asyncio.to_thread(fetch, port, f"http://other.test:{servers[0]}/hello")
    finally:
        await egress.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
    assert (neighbour, own_sandbox) == (b"refused", b"taken")
    refused = [d for k, d in events.events if k == "broker_notice"]
    assert any("without group" in str(d.get("message")) for d in refused), events.events
    assert allowed[0] == 200
    assert denied[0] == 403 and "mode dontAsk denies it" in denied[1]


@pytest.mark.parametrize("proxied", [ALLOW], indirect=True)
async def test_a_passed_listener_the_sandbox_shuts_down_is_dropped(
    proxied: Proxied, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sandbox that shuts down its copy of a listening socket it passed leaves the
    proxy's copy readable for ever; the proxy's acceptor ends instead of spinning on it
    (and the proxy keeps serving), quietly."""
    proxy = proxied.egress.proxy
    assert proxy is not None
    mine = egress_forward.listen()
    assert await asyncio.to_thread(
        egress_forward.pass_listener, mine, str(tmp_path / "egress.sock")
    )
    assert [a.running for a in proxy._acceptors] == [True]
    mine.shutdown(socket.SHUT_RDWR)
    mine.close()
    for _ in range(1000):  # its accept fails at once; bounded, never timed
        if not proxy._acceptors[0].running:
            break
        await asyncio.sleep(0.01)
    assert [a.running for a in proxy._acceptors] == [False]
    status, _, _ = await asyncio.to_thread(fetch, proxied.port, "http://allowed.test:1/hello")
    assert status == 502  # still serving (nothing listens on port 1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
