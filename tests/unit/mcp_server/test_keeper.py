"""The spawned `warden mcp` process and the process that holds its session
(`mcp_server.keeper`), with real processes and real signals: a client's kill of the
spawned pid reaches the session's process as a stop it handles on its own time, a
SIGKILL of it too, and otherwise the spawned process is a transparent wrapper."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.mcp_server.server import to_its_end
from tests.conftest import REPO_ROOT

SESSION = """
import json, os, select, signal, sys, time
from orchestrator.mcp_server import keeper

keeper.split()
keeper.bind_to_parent()
got = []
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda signum, frame: got.append(signum))
out = sys.argv[1]
print(os.getpid(), flush=True)
while not got:
    if select.select([sys.stdin], [], [], 0.02)[0] and not sys.stdin.readline():
        break
time.sleep(0.3 if got else 0)  # a session's end, longer than the client waits
with open(out + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "signals": got}, f)
os.rename(out + ".tmp", out)
sys.exit(7)
"""


def spawn(tmp_path: Path) -> tuple[subprocess.Popen[str], int, Path]:
    """The program as a client spawns it (in a process group of its own, as the MCP
    SDK's client does), and its session's pid once it is ready."""
    out = tmp_path / "ended.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", SESSION, str(out)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline()), out


def ended(out: Path, timeout_s: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while not out.exists():
        assert time.monotonic() < deadline, "the session's process never ended"
        time.sleep(0.02)
    found = json.loads(out.read_text())
    assert isinstance(found, dict)
    return found


def close(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


def test_claude_codes_kill_of_the_spawned_pid_is_a_stop_the_session_finishes(
    tmp_path: Path,
) -> None:
    proc, session_pid, out = spawn(tmp_path)
    try:
        assert session_pid != proc.pid
        proc.send_signal(signal.SIGINT)
        # The spawned process is gone at once (before Claude Code's SIGTERM, 100 ms on).
        assert proc.wait(timeout=30) == 128 + signal.SIGINT
        done = ended(out)  # ... and the session's process ended on its own time
        assert done["pid"] == session_pid
        assert done["signals"][0] == signal.SIGINT  # type: ignore[index]
    finally:
        close(proc)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_the_session_is_stopped_when_the_spawned_process_dies_however_it_dies(
    tmp_path: Path, signum: int
) -> None:
    proc, _, out = spawn(tmp_path)
    try:
        proc.send_signal(signum)
        proc.wait(timeout=30)
        signals = ended(out)["signals"]  # passed on, and the kernel's
        assert isinstance(signals, list) and set(signals) == {signal.SIGTERM}
    finally:
        close(proc)


def test_a_client_that_kills_the_group_it_spawned_reaches_only_the_spawned_process(
    tmp_path: Path,
) -> None:
    """The MCP SDK's stdio client ends a slow server with SIGTERM and then SIGKILL to
    its whole process group: the session's process is in none of it, so it is
    stopped (SIGTERM) and ends on its own time."""
    proc, _, out = spawn(tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert ended(out)["signals"] == [signal.SIGTERM]  # from the kernel (PDEATHSIG)
    finally:
        close(proc)


def test_otherwise_the_spawned_process_is_a_transparent_wrapper(tmp_path: Path) -> None:
    """The client's end of input ends the session; its exit status is the spawned
    process's; and the output pipe closes when the session's process closes it (the
    spawned one holds no end of the wire)."""
    proc, _, out = spawn(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.stdout.read() == ""  # EOF: no process holds the pipe any more
    assert proc.wait(timeout=30) == 7
    assert ended(out)["signals"] == []
    proc.stdout.close()


async def test_a_stop_while_the_session_ends_waits_for_its_end() -> None:
    """A cancellation (a stop signal) of a task waiting for the session's end does not
    cut that end short; it is raised once the end is over."""
    steps: list[str] = []

    async def closing() -> None:
        steps.append("closing")
        await asyncio.sleep(0.2)
        steps.append("closed")

    waiting = asyncio.create_task(to_its_end(closing()))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert steps == ["closing", "closed"]


def test_the_first_initialize_is_answered_before_the_fork_and_the_rest_after(
    tmp_path: Path,
) -> None:
    """`warden mcp`'s spawned process answers the client's `initialize` itself, before
    it forks; the session's process reads everything after it (nothing read ahead is
    lost across the fork), and the SDK still gets that `initialize` to replay."""
    from orchestrator.mcp_server.front import StdioFront

    client_in, front_in = os.pipe()
    front_out, client_out = os.pipe()
    hello = {"protocolVersion": "2025-06-18", "capabilities": {},
             "clientInfo": {"name": "t", "version": "1"}}  # fmt: skip
    os.write(front_in, (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                    "params": hello}) + "\n"
                        + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}) + "\n"
                        ).encode())  # fmt: skip
    front = StdioFront(client_in, client_out)
    front.answer_first()  # no reader thread yet
    with os.fdopen(front_out, "rb") as answers:
        first = json.loads(answers.readline())
        assert first["id"] == 1 and first["result"]["serverInfo"]["name"] == "warden"
        child = os.fork()
        if child == 0:  # the session's process: the ping, read ahead before the fork
            front.start()
            os._exit(0 if json.loads(answers.readline())["id"] == 2 else 1)
        os.close(front_in)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert front.drops(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}))
