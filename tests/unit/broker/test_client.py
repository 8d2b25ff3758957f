"""A run does not wait for the model SDK's import: nothing that starts a run (its
wiring, the manager, the broker, the CLI's run command) imports it; the run's client
is built in the background and the first call awaits it; the garbage collector,
off during start-up, comes back on only once that import is over; a process that
ends during the import waits for it (teardown must not stop it half-way); and a run's
process leaves trio out of the SDK's HTTP stack."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from orchestrator import background_import, start_up_done
from orchestrator.broker import PendingClient, Upstream
from orchestrator.broker.client import ModelClientClosed
from orchestrator.broker.upstream import forward_messages
from orchestrator.jsontypes import JSONObject
from orchestrator.scripted import Conversation, Match, Script, ScriptedModelServer, TextBlock, Turn

KEY = "sk-host-only"

RUN_START_MODULES = (
    "orchestrator.runtime.session",
    "orchestrator.runtime.manager",
    "orchestrator.runtime.parent",
    "orchestrator.broker",
    "orchestrator.api",
    "orchestrator.commands.run",
    "orchestrator.commands.resume",
    "orchestrator.mcp_server.runs",
)


def test_starting_a_run_imports_no_model_sdk() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in RUN_START_MODULES)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] == 'anthropic')[:3])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


# Registered before broker.client is imported, so it runs after that module's own exit
# handler (atexit runs handlers last-in, first-out): what teardown would find.
EXIT_DURING_IMPORT = """
import atexit, sys
atexit.register(lambda: print("imported at teardown:", "orchestrator.broker.upstream" in sys.modules))
from orchestrator.broker.client import import_in_background
import_in_background()
sys.exit(3)
"""


def test_a_process_that_ends_during_the_sdk_import_waits_for_it() -> None:
    # Teardown stops a daemon thread where it next takes the interpreter lock; one
    # stopped inside pydantic-core's compiled code aborts the process (SIGABRT): one in
    # ten `warden run`s that failed in their first second ended with 134.
    out = subprocess.run(
        [sys.executable, "-c", EXIT_DURING_IMPORT],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (out.returncode, out.stdout.strip()) == (3, "imported at teardown: True"), out.stderr


RUN_PROCESS_HTTP_STACK = """
import asyncio, sys
sys.argv = ["warden", "run", "--help"]
from orchestrator import cli
try:
    cli.main()
except SystemExit:
    pass
from httpcore2 import _synchronization
async def library():
    return _synchronization.current_async_library()
print(_synchronization.trio is None, asyncio.run(library()), "trio" in sys.modules)
"""


def test_a_run_process_serves_asyncio_without_importing_trio() -> None:
    # httpcore2 imports trio whenever it is installed (~40 ms before the first model
    # request); warden's run, resume and mcp processes only run asyncio loops.
    out = subprocess.run(
        [sys.executable, "-c", RUN_PROCESS_HTTP_STACK],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.split()[-3:] == ["True", "asyncio", "False"], out.stdout + out.stderr


@pytest.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    script = Script(
        conversations=[
            Conversation(
                name="hello",
                match=Match(prompt_contains="hello"),
                turns=[Turn(content=[TextBlock(text="hi there")])],
            )
        ]
    )
    async with ScriptedModelServer(script, expected_api_key=KEY) as srv:
        yield srv


def _pending(server: ScriptedModelServer) -> PendingClient:
    return PendingClient(server.base_url, KEY, max_retries=0, retry_total_s=5.0)


async def test_the_parent_and_the_broker_call_the_model_through_a_pending_client(
    server: ScriptedModelServer,
) -> None:
    pending = _pending(server)
    try:
        message = await pending.messages.create(
            model="m",
            max_tokens=100,
            system=[{"type": "text", "text": "be brief"}],
            messages=[{"role": "user", "content": "hello"}],
            tools=[],
        )
        assert message.content[0].type == "text" and message.content[0].text == "hi there"
        body: JSONObject = {
            "model": "m",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hello again"}],
        }
        answer = await forward_messages(Upstream(pending), body, [], None)
        assert answer.status == 200 and answer.retries == 0
        assert len(server.requests) == 2
        assert all(r.api_key_matched is not False for r in server.requests)
    finally:
        await pending.close()
    assert (await pending.built()).is_closed()


async def test_a_client_closed_before_it_was_built_is_never_left_open(
    server: ScriptedModelServer,
) -> None:
    pending = _pending(server)
    await pending.close()  # at once: the background build may or may not have happened
    try:
        client = await pending.built()
    except ModelClientClosed:
        return
    assert client.is_closed()


def test_the_collector_comes_back_after_the_background_imports() -> None:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        ended = background_import()  # counted before its thread runs
        start_up_done()  # the command's own imports are over...
        assert not gc.isenabled()  # ...but the background one is not
        ended()
        assert gc.isenabled()
        ended()  # a second call changes nothing
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        if not was_enabled:
            gc.disable()
