"""The forwarder's listening socket, passed to the host proxy, from inside a real
sandbox (`warden exec --allow-domain`): the proxy takes it, so no forwarder process
runs in the sandbox, and every connection the proxy accepts on it meets the same
checks as a handed-over one (an allowed host answers, a denied host and an IP
literal get a 403 naming why, the connection cap a 429, each connection is counted).
What else a hostile sandbox passes with the listener's marker is refused: a
connected socket is not taken, and beyond `MAX_PASSED_LISTENERS` no listener is. A
listener the sandbox passes itself is held to the same checks. The upstream is a test
server on 127.0.0.1, reached only through the proxy's in-process test resolver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.egress.flags import EgressFlags
from orchestrator.egress.handover import MAX_PASSED_LISTENERS
from orchestrator.egress.limits import EgressLimits
from tests.egress_support import upstream
from tests.integration.egress_probe import run_probe

pytestmark = pytest.mark.integration

MAX_CONNECTIONS = 6
PROBE = r"""
import json, os, socket, sys
from sandbox_tools import egress_forward as fwd

port, extra = int(sys.argv[1]), int(sys.argv[2])
PPORT = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
out = {"processes": []}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out["processes"].append(f.read().replace(b"\0", b" ").decode().strip())
        except OSError:
            pass


def ask(proxy_port, host, send=True):
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=60)
    if send:  # (a connection over the cap is refused before its head is read)
        s.sendall(f"GET http://{host}:{port}/hello HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    return [head.split(b"\r\n")[0].decode(), body.decode()]


out["allowed"] = ask(PPORT, "allowed.test")
out["denied"] = ask(PPORT, "denied.test")
out["literal"] = ask(PPORT, "127.0.0.1")
# A connected socket passed as if it were the listening one: not taken.
other = socket.create_connection(("127.0.0.1", PPORT), timeout=60)
out["connected_taken"] = fwd.pass_listener(other, fwd.EGRESS_SOCKET)
other.close()
# Listeners of the sandbox's own, passed: taken up to the proxy's limit only.
mine = [fwd.listen() for _ in range(extra)]
out["taken"] = [fwd.pass_listener(s, fwd.EGRESS_SOCKET) for s in mine]
out["own_allowed"] = ask(mine[0].getsockname()[1], "allowed.test")
out["own_denied"] = ask(mine[0].getsockname()[1], "denied.test")
out["over_cap"] = ask(PPORT, "allowed.test", send=False)
print("PROBE " + json.dumps(out))
"""


def probe(
    settings: Settings, workspace: Path, session: str, port: int
) -> tuple[dict[str, Any], dict[str, object]]:
    flags = EgressFlags(
        ("allowed.test",), ("denied.test",), EgressLimits(max_connections=MAX_CONNECTIONS)
    )
    hosts = {"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1"}
    args = [str(port), str(MAX_PASSED_LISTENERS)]
    return run_probe(settings, workspace, session, "listener", PROBE, args, flags, hosts)


def test_the_proxy_accepts_on_the_sandboxs_listener_with_every_check(
    settings: Settings, workspace: Path, test_session: str
) -> None:
    with upstream() as port:
        out, summary = probe(settings, workspace, test_session, port)
    # The proxy took the listening socket: no forwarder process was left to run (the
    # forked forwarder keeps the wrapper's command line; docker-init shows it too).
    forwarders = [p for p in out["processes"] if p.startswith("python3 -m sandbox_tools.egress")]
    assert forwarders == [], out["processes"]
    assert out["allowed"] == ["HTTP/1.1 200 OK", f"hello from allowed.test:{port}\n"]
    status, body = out["denied"]
    assert status.startswith("HTTP/1.1 403") and "denied by the rule denied.test" in body
    status, body = out["literal"]
    assert status.startswith("HTTP/1.1 403") and "is an IP address" in body
    assert out["connected_taken"] is False
    # The forwarder's listener is one of the proxy's MAX_PASSED_LISTENERS.
    assert out["taken"] == [True] * (MAX_PASSED_LISTENERS - 1) + [False]
    assert out["own_allowed"][0] == "HTTP/1.1 200 OK"
    status, body = out["own_denied"]
    assert status.startswith("HTTP/1.1 403") and "denied by the rule denied.test" in body
    status, body = out["over_cap"]
    assert status.startswith("HTTP/1.1 429") and f"connection limit ({MAX_CONNECTIONS})" in body
    assert summary["connections"] == MAX_CONNECTIONS
