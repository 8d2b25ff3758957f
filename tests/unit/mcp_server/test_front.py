"""The stdio front of `warden mcp` answers `initialize` exactly as the SDK server that
takes over later would, lists the tools as it does before the SDK is loaded, hands the stream to
the real SDK server without a second `initialize` answer reaching the client, and a
client that goes away ends the session quietly; `warden mcp` answers `initialize` before
its CLI has loaded."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from mcp.shared.message import SessionMessage

from orchestrator.errors import ConfigError
from orchestrator.mcp_server.front import StdioFront
from orchestrator.mcp_server.listing import tool_dicts
from orchestrator.mcp_server.runs import SessionRun, SessionRuns
from orchestrator.mcp_server.server import build_server, serve_stdio
from tests.conftest import REPO_ROOT


class NoRuns:
    """What `serve_stdio` needs of `SessionRuns`, with a run that could not open."""

    closed: bool | None = None

    def claim(self) -> SessionRun:
        slot = SessionRun()
        slot.ready.set_exception(ConfigError("no run in this test"))
        return slot

    async def close(self, *, stopping: bool) -> None:
        self.closed = stopping


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return (json.dumps(message) + "\n").encode()


def initialize(request_id: int, version: str) -> bytes:
    return request(
        request_id,
        "initialize",
        {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    )


INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'


async def sdk_answer(version: str) -> dict[str, Any]:
    """The SDK server's own answer to `initialize` (as its stdio transport writes it)."""
    server = build_server(cast(SessionRuns, NoRuns()))
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](1)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](1)
    async with to_server, server_reads, server_writes, from_server, anyio.create_task_group() as tg:
        tg.start_soon(
            server.run, server_reads, server_writes, server.create_initialization_options()
        )
        line = initialize(1, version)
        await to_server.send(SessionMessage(types.jsonrpc_message_adapter.validate_json(line)))
        answer = await from_server.receive()
        tg.cancel_scope.cancel()
    dumped = answer.message.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert isinstance(dumped, dict)
    return dumped


@contextmanager
def piped_front() -> Iterator[tuple[StdioFront, int, Any]]:
    """A front on pipes: (front, the client's write fd, the client's reader)."""
    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    front = StdioFront(c2s_r, s2c_w)
    reader = os.fdopen(s2c_r, "rb")
    try:
        yield front.start(), c2s_w, reader
    finally:
        with suppress(OSError):
            os.close(c2s_w)  # the front reads the end of its input ...
        # ... before its descriptor is closed: else its reader thread could read from
        # whatever the next test opens under that number (an event loop's self-pipe).
        assert front.wait_input_ended(60), "the front's reader did not see its input end"
        os.close(c2s_r)
        front.close()
        reader.close()


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "1999-01-01"])
def test_the_front_answers_initialize_as_the_sdk_server_does(version: str) -> None:
    with piped_front() as (front, client, reader):
        os.write(client, initialize(1, version))
        ours = json.loads(reader.readline())
        front.set_listing(None)
    assert ours == asyncio.run(sdk_answer(version))


async def test_the_sdk_server_takes_over_without_a_second_initialize_answer() -> None:
    with piped_front() as (front, client, reader):
        os.write(client, initialize(1, "2025-11-25") + INITIALIZED + request(2, "tools/list"))
        front.set_listing(tool_dicts([]))
        # Waiting for the SDK: this request is kept for it, in order.
        os.write(client, request(3, "resources/list"))
        first = json.loads(reader.readline())
        second = json.loads(reader.readline())
        runs = NoRuns()
        serving = asyncio.create_task(serve_stdio(cast(SessionRuns, runs), front))
        third = json.loads(await asyncio.to_thread(reader.readline))
        os.write(client, request(4, "ping"))
        fourth = json.loads(await asyncio.to_thread(reader.readline))
        os.write(client, request(5, "tools/list"))  # now the SDK server's handler lists
        fifth = json.loads(await asyncio.to_thread(reader.readline))
        os.close(client)  # the client leaves: the session ends
        await asyncio.wait_for(serving, 30)
        front.close()
        rest = await asyncio.to_thread(reader.read)
    assert [m["id"] for m in (first, second, third, fourth, fifth)] == [1, 2, 3, 4, 5]
    # The SDK answered request 3, which only an initialized session may: it was
    # given the handshake; its own answer to `initialize` never reached the client.
    assert third["result"]["resources"][0]["uri"] == "warden://agents"
    assert fourth["result"] == {}
    # What the front listed is what the SDK server lists (for the same agent types).
    assert second["result"] == fifth["result"]
    assert rest == b""
    assert runs.closed is False  # ended as a client that closes its end ends it


async def test_a_client_that_goes_away_mid_session_ends_it_quietly() -> None:
    with piped_front() as (front, client, reader):
        os.write(client, initialize(1, "2025-11-25") + INITIALIZED)
        front.set_listing(None)
        reader.readline()
        runs = NoRuns()
        serving = asyncio.create_task(serve_stdio(cast(SessionRuns, runs), front))
        reader.close()  # the client stops reading ...
        os.write(client, request(2, "resources/list"))  # ... and its answer cannot be sent
        await asyncio.wait_for(serving, 30)  # no BrokenPipeError: the session just ends
    assert front.client_gone
    assert runs.closed is False


HOLD_CLICK = """
import os, runpy, sys

def hold(event, args):
    # The CLI's first import of click waits until the test has its `initialize` answer.
    if event == "import" and args[0] == "click" and "click" not in sys.modules:
        with open(os.environ["HOLD_FIFO"]):
            pass

sys.addaudithook(hold)
sys.argv = ["warden", *sys.argv[1:]]
runpy.run_module("orchestrator", run_name="__main__")
"""


def test_warden_mcp_answers_initialize_before_the_cli_has_loaded(tmp_path: Path) -> None:
    """`warden mcp` (stdio) answers `initialize` from its front while click, the command
    and everything after are still to load: here click's import is held until the
    answer has arrived."""
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {**os.environ, "HOLD_FIFO": str(fifo), "ANTHROPIC_API_KEY": "sk-ant-front-test",
           "WARDEN_STATE_DIR": str(tmp_path / "state"),
           "WARDEN_CONFIG_DIR": str(tmp_path / "config"),
           "PYTHONPATH": str(REPO_ROOT)}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_CLICK, "mcp", "--workspace", str(workspace)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(initialize(1, "2025-11-25"))
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())  # click is still held here
        assert answer["result"]["serverInfo"]["name"] == "warden"
        with open(fifo, "w"):  # let click load: the command goes on as before
            pass
        proc.stdin.write(INITIALIZED + request(2, "tools/list"))
        proc.stdin.flush()
        listed = json.loads(proc.stdout.readline())
        assert [t["name"] for t in listed["result"]["tools"]] == ["Task", "TaskOutput", "TaskStop"]
        proc.stdin.close()  # the client leaves: the session ends
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
