"""Attacks on the egress proxy's wire from inside a real sandbox all fail: a CONNECT
tunnel to an allowed host on a non-TLS port cannot carry plain requests for another
host (only a `tcp://HOST:PORT` rule opens a raw tunnel); a second ClientHello after a
HelloRetryRequest cannot switch the server name; bare LF / CR, obs-fold and
duplicate lengths cannot smuggle a second request past the proxy; and 20 parallel
connections to one new host ask the person once. Honest clients still work (an
HTTPS download through a HelloRetryRequest, a raw TCP rule). Every upstream is a
test server on 127.0.0.1, reached only through the proxy's in-process test resolver.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.egress.resolver import StaticResolver
from orchestrator.egress.setup import EgressRequest
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.egress_support import LocalCA, make_ca, upstream
from tests.integration.harness import convo, requests_of, scripted_run, text, tool

pytestmark = pytest.mark.integration

ALERT_UNRECOGNIZED_NAME = "15030300020270"
PROBE = r"""
import json, os, socket, ssl, sys, threading, urllib.error, urllib.request

H, S = int(sys.argv[1]), int(sys.argv[2])
CA = "/workspace/ca.pem"
PHOST, PPORT = os.environ["HTTPS_PROXY"].removeprefix("http://").rsplit(":", 1)
HRR_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")
out = {}


def drain(s, limit=65536):
    data = b""
    s.settimeout(10)
    try:
        while len(data) < limit and (chunk := s.recv(65536)):
            data += chunk
    except OSError:
        pass
    return data


def send_raw(payload):
    s = socket.create_connection((PHOST, int(PPORT)), timeout=30)
    s.sendall(payload)
    data = drain(s)
    s.close()
    return data


def tunnel(host, port):
    s = socket.create_connection((PHOST, int(PPORT)), timeout=30)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    return s, head.split(b"\r\n")[0].decode()


def record(s):
    head = b""
    while len(head) < 5:
        head += s.recv(5 - len(head))
    body = b""
    while len(body) < int.from_bytes(head[3:5], "big"):
        body += s.recv(65536)
    return head + body


# 1. A tunnel to an allowed host on a plain-HTTP port, carrying a request for another host.
s, status = tunnel("allowed.test", H)
s.sendall(b"GET /hello HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n")
out["raw_tunnel"] = [status, drain(s).hex()]
# ... and the same through a host a `tcp://` rule names: a raw tunnel, as asked.
s, status = tunnel("raw.test", H)
s.sendall(b"GET /hello HTTP/1.1\r\nHost: raw.test\r\nConnection: close\r\n\r\n")
out["raw_rule"] = [status, drain(s).decode(errors="replace")[-40:]]

# 2. HelloRetryRequest, then a second ClientHello naming another host (same length).
s, status = tunnel("allowed.test", S)
incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ssl.create_default_context(cafile=CA).wrap_bio(incoming, outgoing, server_hostname="allowed.test")
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
s.sendall(outgoing.read())
reply = record(s)
retry = reply[11:43] == HRR_RANDOM
incoming.write(reply)
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
second = outgoing.read()
s.sendall(second.replace(b"allowed.test", b"another.test"))
out["hello_retry_switch"] = [status, retry, b"another.test" in second.replace(b"allowed.test", b"another.test"), drain(s).hex()]
# ... while an honest client gets through the same HelloRetryRequest.
try:
    ctx = ssl.create_default_context(cafile=CA)
    with urllib.request.urlopen(f"https://allowed.test:{S}/hello", timeout=30, context=ctx) as r:
        out["hello_retry_honest"] = [r.status, r.read().decode()]
except Exception as exc:
    out["hello_retry_honest"] = ["error", repr(exc)[:300]]

# 3. Smuggling a second request for another host inside one plain-http request.
pre = f"GET http://allowed.test:{H}/hello HTTP/1.1\r\nHost: allowed.test:{H}\r\n".encode()
inner = b"GET /hello HTTP/1.1\nHost: denied.test\n"
attempts = {
    # A lenient server ends the first request at "\n\n" and reads the second.
    "bare_lf": pre + b"X-A: 1\n\n" + inner + b"X-B: 2\r\n\r\n",
    "bare_cr": pre + b"X-A: 1\r\r" + inner.replace(b"\n", b"\r") + b"\r\n\r\n",
    "obs_fold": pre + b"X-A: 1\r\n Content-Length: 39\r\n\r\n" + inner.replace(b"\n", b"\r\n") + b"\r\n",
    "duplicate_length": pre.replace(b"GET", b"POST", 1) + b"Content-Length: 39\r\nContent-Length: 39\r\n\r\n" + inner.replace(b"\n", b"\r\n") + b"\r\n",
    "listed_length": pre.replace(b"GET", b"POST", 1) + b"Content-Length: 39, 39\r\n\r\n" + inner.replace(b"\n", b"\r\n") + b"\r\n",
    "te_and_length": pre.replace(b"GET", b"POST", 1) + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + inner.replace(b"\n", b"\r\n") + b"\r\n",
}
for name, payload in attempts.items():
    data = send_raw(payload).decode(errors="replace")
    out["smuggle_" + name] = [data.split("\r\n")[0], "denied.test" in data, data[-200:]]

# 4. Twenty parallel connections to one host nobody has decided on.
results = []
def fetch():
    try:
        with urllib.request.urlopen(f"http://ask.test:{H}/hello", timeout=60) as r:
            results.append(r.status)
    except urllib.error.HTTPError as exc:
        results.append(exc.code)
    except Exception as exc:
        results.append(repr(exc)[:100])
threads = [threading.Thread(target=fetch) for _ in range(20)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["parallel_ask"] = sorted(map(str, results))
print("PROBE " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCA, int, int]]:
    ca = make_ca(tmp_path_factory.mktemp("ca"), ["allowed.test"])
    with upstream() as http_port, upstream(ca, hello_retry=True) as https_port:
        yield ca, http_port, https_port


def probe_output(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    raw = json.dumps(results[0]["content"]) if results else ""
    text_ = json.loads(raw) if raw.startswith('"') else raw
    line = next((ln for ln in str(text_).splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, f"no probe output in {text_!r}"
    parsed: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    return parsed


async def test_attacks_on_the_egress_wire_fail_from_inside_a_sandbox(
    settings: Settings, workspace: Path, local: tuple[LocalCA, int, int]
) -> None:
    ca, http_port, https_port = local
    shutil.copy(ca.ca_file, workspace / "ca.pem")
    (workspace / "probe.py").write_text(PROBE)
    owner = workspace.stat()
    for name in ("ca.pem", "probe.py"):
        os.chown(workspace / name, owner.st_uid, owner.st_gid)
    questions: list[ApprovalQuestion] = []

    async def decide(q: ApprovalQuestion) -> ApprovalAnswer:
        questions.append(q)
        await asyncio.sleep(1.0)  # a person takes a moment; connections pile up
        return ApprovalAnswer(behavior="allow", scope="session", decided_by="test-human")

    class Approver:
        async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
            return await decide(q)

    script = [
        convo(
            "wire",
            {"prompt_contains": "WIRE"},
            [tool("Bash", command=f"python3 probe.py {http_port} {https_port}", timeout=300000)],
            [text("done")],
        )
    ]
    names = ("allowed.test", "another.test", "denied.test", "raw.test", "ask.test")
    egress = EgressRequest(
        allow_domains=("allowed.test", f"tcp://raw.test:{http_port}"),
        deny_domains=("denied.test",),
        resolver=StaticResolver(dict.fromkeys(names, "127.0.0.1")),
    )
    async with scripted_run(
        settings, workspace, script, mode="default", allow=("Bash",), approver=Approver(),
        egress=egress,
    ) as (run, server):  # fmt: skip
        result = await run.manager.run_task(
            TaskInput(description="wire", prompt="WIRE", subagent_type="general-purpose")
        )
        audit = [a for a in run.store.audit(run.run_id) if a.tool_name == "Network"]

    assert result.status is TaskStatus.COMPLETED, result.error
    out = probe_output(requests_of(server, "wire")[1].body)
    # 1. No raw tunnel without a raw rule: the plain request never reached a server.
    status, answer = out["raw_tunnel"]
    assert status.startswith("HTTP/1.1 200") and answer == ALERT_UNRECOGNIZED_NAME, out
    assert any("must carry TLS naming allowed.test" in a.reason for a in audit)
    assert out["raw_rule"][0].startswith("HTTP/1.1 200")
    assert out["raw_rule"][1].endswith("hello from raw.test\n")
    # 2. The second ClientHello is checked like the first.
    status, retried, switched, answer = out["hello_retry_switch"]
    assert retried and switched, out  # the server did ask again; the name was changed
    assert answer == ALERT_UNRECOGNIZED_NAME, out
    assert any("'another.test' differs from the CONNECT host" in a.reason for a in audit)
    assert out["hello_retry_honest"] == [200, f"hello from allowed.test:{https_port}\n"], out
    # 3. Nothing smuggled reached the upstream; each attempt is refused with a reason.
    for name in ("bare_lf", "bare_cr", "obs_fold", "duplicate_length", "listed_length",
                 "te_and_length"):  # fmt: skip
        line, reached, body = out[f"smuggle_{name}"]
        assert not reached, (name, out[f"smuggle_{name}"])
        assert line.startswith(("HTTP/1.1 400", "HTTP/1.1 411")), (name, line, body)
        assert "warden egress:" in body
    # 4. One question for twenty connections; all of them got its answer.
    asked = [q for q in questions if q.tool_name == "Network"]
    assert [q.tool_input["host"] for q in asked] == ["ask.test"], asked
    assert out["parallel_ask"] == ["200"] * 20, out["parallel_ask"]
