"""The egress proxy caps a sandbox's connections from their accept, not from their
first byte: from inside a real sandbox with egress on, 3,000 connections that send
nothing, to the proxy's port on 127.0.0.1 (accepted on the sandbox's passed
listener) and to its Unix socket, hold at most the open-connection cap of the
proxy's descriptors (counted in /proc of the process the proxy runs in); the excess
is closed at accept, and one event says so, not one per connection."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orchestrator import labels as wl
from orchestrator.backend.connect import connect
from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from orchestrator.egress.flags import EgressFlags
from orchestrator.egress.limits import DEFAULT_MAX_OPEN_CONNECTIONS, EgressLimits
from orchestrator.egress.oneoff import start_exec_egress
from orchestrator.egress.resolver import StaticResolver
from orchestrator.images import resolve_image
from orchestrator.lifecycle import socket_dirs

pytestmark = pytest.mark.integration

CONNECTIONS = 3000
CAP = DEFAULT_MAX_OPEN_CONNECTIONS
PROBE = r"""
import json, os, select, socket, sys, time
n, cap = int(sys.argv[1]), int(sys.argv[2])
PPORT = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
EGRESS = "/run/warden/egress.sock"

def wait_for(name):
    end = time.monotonic() + 300
    while not os.path.exists(f"/workspace/{name}"):
        if time.monotonic() > end:
            raise SystemExit(f"the host never wrote {name}")
        time.sleep(0.02)

def mark(name):
    open(f"/workspace/{name}", "w").close()

def held_by_proxy(socks):
    # A connection the proxy closed is readable (its 429, or the end); one it holds
    # waiting for a request head is not.
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    ready = {fd for fd, _ in poller.poll(0)}
    return sum(1 for s in socks if s.fileno() not in ready)

out = {}
mark("ready")
wait_for("go")
for kind in ("tcp", "unix"):
    socks = []
    for _ in range(n):
        if kind == "tcp":
            s = socket.create_connection(("127.0.0.1", PPORT), timeout=120)
        else:
            s = socket.socket(socket.AF_UNIX)
            s.connect(EGRESS)  # blocking: with a full backlog it waits for an accept
        socks.append(s)
    # The proxy closes the excess as it accepts it; wait for that (well inside the
    # proxy's 30 s request-head timeout, after which it would close them anyway).
    start = time.monotonic()
    while (held := held_by_proxy(socks)) > cap and time.monotonic() < start + 20:
        time.sleep(0.05)
    out[kind] = {"opened": len(socks), "held": held, "waited_s": time.monotonic() - start}
    mark(f"held-{kind}")
    wait_for(f"counted-{kind}")
    for s in socks:
        s.close()
print("PROBE " + json.dumps(out))
"""


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def until(check: Callable[[], bool], job: Future[Any], what: str) -> None:
    """Wait for `check` (or the sandbox's end, which fails the test with its output)."""
    end = time.monotonic() + 300
    while not check():
        if job.done():
            raise AssertionError(f"the sandbox ended before {what}: {job.result()!r}")
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_sandbox_holds_at_most_the_cap_of_the_proxys_descriptors(
    settings: Settings, workspace: Path, test_session: str
) -> None:
    client = connect()
    backend = DockerBackend(
        client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    spec = SandboxSpec(
        image=resolve_image(client, "agent"),
        command=["python3", "-c", PROBE, str(CONNECTIONS), str(CAP)],
        workspace=workspace,
        warden_labels=wl.warden_labels(test_session, exec=f"{test_session}-fds"),
        timeout_s=600,
    )
    flags = EgressFlags(("allowed.test",), (), EgressLimits())
    egress = start_exec_egress(
        settings, spec, flags, socket_root=socket_dirs.socket_root(),
        resolver=StaticResolver({"allowed.test": "127.0.0.1"}),
    )  # fmt: skip
    counts: dict[str, int] = {}
    try:
        with ThreadPoolExecutor(1) as pool:
            job = pool.submit(backend.run, egress.sandbox_spec(spec))
            until((workspace / "ready").exists, job, "the probe started")
            counts["baseline"] = open_descriptors()
            (workspace / "go").touch()
            for kind in ("tcp", "unix"):
                until((workspace / f"held-{kind}").exists, job, f"{kind} connections")
                counts[kind] = open_descriptors()
                (workspace / f"counted-{kind}").touch()
            result = job.result()
    finally:
        egress.close()
        client.close()
    events = egress.background.recorder.events
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert result.exit_code == 0 and line is not None, result.stderr[-3000:]
    out = json.loads(line.removeprefix("PROBE "))
    for kind in ("tcp", "unix"):
        assert out[kind]["opened"] == CONNECTIONS, out
        # The sandbox sees the excess closed, and the proxy's process holds at most
        # the cap (plus a few descriptors of its own) while the rest stay open.
        assert out[kind]["held"] <= CAP, out
        assert counts[kind] - counts["baseline"] <= CAP + 16, counts
    notices = [d for kind, d in events if kind == "broker_notice"]
    limit_notices = [d for d in notices if d.get("notice") == "egress_open_limit"]
    assert len(limit_notices) == 1, notices
    assert f"limit of {CAP} open connections" in str(limit_notices[0]["message"])
