"""A hostile sandbox cannot freeze the host's egress proxy through a socket it shares
with it. A descriptor passed over `SCM_RIGHTS` shares its open file description, and
with it the `O_NONBLOCK` flag, with the sandbox's own copy: a sandbox that clears the
flag on its copy after the proxy set it makes every call the proxy expects to return
at once wait instead, on the host's event loop (which answers every sandbox's
permission requests and runs the run's timeouts). Tried from inside a real sandbox
(`warden exec --allow-domain`), both ways a socket could come from the sandbox: its
passed listening socket (made blocking, then one connection waits on it) and a
passed connection (made blocking again and again) that never sends its request.
After each, a plain request through the proxy must still be answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.egress.flags import EgressFlags
from orchestrator.egress.limits import EgressLimits
from tests.egress_support import upstream
from tests.integration.egress_probe import run_probe

pytestmark = pytest.mark.integration

PROBE = r"""
import array, fcntl, json, os, socket, sys, time
from sandbox_tools import egress_forward as fwd

port = int(sys.argv[1])
PPORT = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
WAIT_S = 30.0


def blocking(sock):
    # Clears O_NONBLOCK on the file description the proxy shares.
    flags = fcntl.fcntl(sock.fileno(), fcntl.F_GETFL)
    fcntl.fcntl(sock.fileno(), fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


def ask():
    try:
        s = socket.create_connection(("127.0.0.1", PPORT), timeout=WAIT_S)
        s.sendall(f"GET http://allowed.test:{port}/hello HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode())
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        s.close()
        return got.split(b"\r\n", 1)[0].decode()
    except OSError as exc:
        return f"no answer: {exc}"


out = {"before": ask()}

# 1. A listening socket of the sandbox's own, passed, then made blocking; one
#    connection is made on it and left waiting for the proxy to accept.
mine = fwd.listen()
out["taken"] = fwd.pass_listener(mine, fwd.EGRESS_SOCKET)
blocking(mine)
bait = socket.create_connection(mine.getsockname(), timeout=WAIT_S)
time.sleep(0.5)  # let the proxy see it (and drain the listener)
out["after_listener"] = ask()
unblock = socket.create_connection(mine.getsockname(), timeout=WAIT_S)  # old code: wakes it

# 2. A connection of the sandbox's own, handed over, then made blocking (again and
#    again: the proxy sets its flag once it has it); its request never comes.
server = fwd.listen()
client = socket.create_connection(server.getsockname(), timeout=WAIT_S)
peer, _ = server.accept()
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
    conn.connect(fwd.EGRESS_SOCKET)
    conn.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [client.fileno()]))])
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        blocking(client)
out["after_handover"] = ask()
peer.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")  # old code: wakes it
print("PROBE " + json.dumps(out))
"""


def test_a_sandbox_that_clears_o_nonblock_on_a_shared_socket_does_not_freeze_the_proxy(
    settings: Settings, workspace: Path, test_session: str
) -> None:
    with upstream() as port:
        out, _ = run_probe(
            settings, workspace, test_session, "flag", PROBE, [str(port)],
            EgressFlags(("allowed.test",), (), EgressLimits()), {"allowed.test": "127.0.0.1"},
        )  # fmt: skip
    assert out["before"] == "HTTP/1.1 200 OK"
    assert out["taken"] is True
    assert out["after_listener"] == "HTTP/1.1 200 OK", out
    assert out["after_handover"] == "HTTP/1.1 200 OK", out
