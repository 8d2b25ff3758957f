"""`warden mcp` serves warden's Task tools to any MCP client: the official `mcp` SDK's
own client, over stdio and over streamable HTTP, lists the tools and agent types,
runs a Task whose subagent writes a workspace file from inside a real sandbox, runs
one in the background and collects it with TaskOutput, stops one with TaskStop,
answers a question by MCP elicitation, and reads a denied call and an unknown type as
tool errors. A client that leaves ends its tasks: no container of the run is left,
and the session's result document says what happened."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from orchestrator.config import Settings
from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import REPO_ROOT, warden_argv, warden_env
from tests.integration.harness import containers_of, text, tool

pytestmark = pytest.mark.integration

API_KEY = "sk-ant-mcp-test-key"
TOKEN = "mcp-test-secret-" + "x" * 24
IDLE_S = 2
"""--idle-timeout of the HTTP test's server: a vanished client's session ends this soon."""


def subagent(marker: str, *turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": marker,
        "match": {"prompt_contains": marker},
        "turns": [{"content": t} for t in turns],
    }


SCRIPT = Script.model_validate(
    {
        "conversations": [
            subagent(
                "WRITE-FILE",
                [
                    tool(
                        "Bash",
                        command="id -u > made-in-sandbox.txt; hostname >> made-in-sandbox.txt",
                    )
                ],
                [text("wrote made-in-sandbox.txt")],
            ),
            subagent("SLEEPER", [tool("Bash", command="sleep 120")], [text("slept")]),
            subagent("QUICK", [text("quick answer 42")]),
        ]
    }
)


@contextmanager
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCRIPT, expected_api_key=API_KEY).in_thread() as server:
        yield server


def server_env(settings: Settings, server: ScriptedModelServer) -> dict[str, str]:
    return warden_env(
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_API_KEY=API_KEY,
        WARDEN_STATE_DIR=str(settings.state_dir),
        WARDEN_CONFIG_DIR=str(settings.config_dir),
        CLAUDE_CONFIG_DIR=str(settings.claude_dir),
        WARDEN_MCP_TOKEN=TOKEN,
    )


def first_text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


class Asked:
    """An elicitation callback that answers with `decision` and keeps the questions."""

    def __init__(self, decision: str) -> None:
        self.decision = decision
        self.messages: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.messages.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": self.decision})


@asynccontextmanager
async def stdio_session(
    settings: Settings, server: ScriptedModelServer, workspace: Path, *args: str, **client: Any
) -> AsyncIterator[ClientSession]:
    argv = warden_argv("mcp", "--workspace", str(workspace), "--trust-workspace", *args)
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env=server_env(settings, server), cwd=str(REPO_ROOT)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write, **client) as s:
        await s.initialize()
        yield s


async def written(path: Path, timeout_s: float = 60) -> dict[str, Any]:
    """The result document a session's end writes, once it is there."""
    for _ in range(int(timeout_s / 0.05)):
        if path.exists():
            break
        await asyncio.sleep(0.05)
    return result_document(path)


def result_document(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc


async def test_a_stdio_session_runs_tasks_in_sandboxes_and_ends_them_when_the_client_leaves(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    results = tmp_path / "session.json"
    asked = Asked("allow")
    progress: list[str] = []
    logs: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    with model_server() as server:
        async with stdio_session(
            settings,
            server,
            workspace,
            "--permission-mode", "default",
            "--deny", "Task(general-purpose)",
            "--result-file", str(results),
            elicitation_callback=asked,
            logging_callback=on_log,
        ) as session:  # fmt: skip
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"Task", "TaskOutput", "TaskStop"}
            schema = tools["Task"].input_schema
            assert {"description", "prompt"} <= set(schema["required"])  # subagent_type: general-purpose
            assert "fork" not in schema["properties"]
            assert "- bash:" in (tools["Task"].description or "")
            listing = await session.read_resource("warden://agents")
            assert "bash:" in listing.contents[0].text  # type: ignore[union-attr]

            # A foreground Task: its Bash call asks (default mode), the question
            # comes to the client as elicitation, the answer lets it run in the sandbox.
            done = await session.call_tool(
                "Task",
                {"description": "write a file", "prompt": "WRITE-FILE", "subagent_type": "bash"},
                progress_callback=on_progress,
            )
            assert not done.is_error, first_text(done)
            assert first_text(done) == "Task Succeeded. Result: wrote made-in-sandbox.txt"
            uid, host = (workspace / "made-in-sandbox.txt").read_text().split()
            assert uid == "1000" and host != os.uname().nodename  # the sandbox, not the host
            assert len(asked.messages) == 1 and "id -u > made-in-sandbox.txt" in asked.messages[0]
            assert progress and not any("task_completed" in p for p in progress), progress
            kinds = [d.get("kind") for d in logs if isinstance(d, dict)]
            # The task's end is a log message, not progress: it comes right before the
            # result, and Claude Code drops a connection on a progress notification
            # that arrives with the result (EventRelay).
            assert "task_started" in kinds and "task_completed" in kinds, logs

            # Refusals are tool errors the model can read.
            unknown = await session.call_tool(
                "Task", {"description": "x", "prompt": "x", "subagent_type": "no-such-type"}
            )
            assert unknown.is_error
            assert "unknown subagent type 'no-such-type'" in first_text(unknown)
            assert "bash" in first_text(unknown)  # names the valid types
            denied = await session.call_tool(
                "Task", {"description": "x", "prompt": "QUICK", "subagent_type": "general-purpose"}
            )
            assert denied.is_error
            assert first_text(denied).startswith("Task denied: denied by Task(general-purpose)")

            # Background, collected with TaskOutput.
            started = await session.call_tool(
                "Task",
                {"description": "q", "prompt": "QUICK", "subagent_type": "bash",
                 "run_in_background": True},
            )  # fmt: skip
            quick_id = first_text(started).split(" with id ")[1].split(".")[0]
            out = await session.call_tool("TaskOutput", {"task_id": quick_id, "timeout": 60_000})
            assert first_text(out) == (
                f"Task {quick_id} status: completed. Task Succeeded. Result: quick answer 42"
            )

            # Background, stopped with TaskStop.
            started = await session.call_tool(
                "Task",
                {"description": "s", "prompt": "SLEEPER", "subagent_type": "bash",
                 "run_in_background": True},
            )  # fmt: skip
            sleeper = first_text(started).split(" with id ")[1].split(".")[0]
            out = await session.call_tool("TaskOutput", {"task_id": sleeper, "block": False})
            assert "no result yet" in first_text(out)
            stop = await session.call_tool("TaskStop", {"task_id": sleeper})
            assert first_text(stop) == f"Stopped {sleeper}."
            out = await session.call_tool("TaskOutput", {"task_id": sleeper, "timeout": 30_000})
            assert f"Task {sleeper} status: stopped." in first_text(out)
            missing = await session.call_tool("TaskOutput", {"task_id": "sa_nope"})
            assert missing.is_error

            # One more left running when the client leaves.
            started = await session.call_tool(
                "Task",
                {"description": "left", "prompt": "SLEEPER", "subagent_type": "bash",
                 "run_in_background": True},
            )  # fmt: skip
            left = first_text(started).split(" with id ")[1].split(".")[0]
            for _ in range(200):  # until its container runs
                out = await session.call_tool("TaskOutput", {"task_id": left, "block": False})
                if "is running" in first_text(out):
                    break
                await asyncio.sleep(0.05)
    # The client is gone: the server ended the run, as Ctrl-C ends one.
    doc = result_document(results)
    assert doc["status"] == "completed"
    statuses = {t["task_id"]: t["status"] for t in doc["tasks"]}
    assert statuses[left] == "stopped" and statuses[sleeper] == "stopped"
    assert statuses[quick_id] == "completed"
    assert containers_of(doc["run_id"]) == []
    denials = [d for d in doc["denials"] if d["tool_name"] == "Task"]
    assert len(denials) == 2  # the unknown type and the deny rule, as CI sees refusals


async def test_without_elicitation_a_question_gets_the_modes_answer(
    settings: Settings, workspace: Path
) -> None:
    with model_server() as server:
        async with stdio_session(settings, server, workspace, "--permission-mode", "default") as s:
            done = await s.call_tool(
                "Task", {"description": "write", "prompt": "WRITE-FILE", "subagent_type": "bash"}
            )
        requests = [r for r in server.requests if r.conversation == "WRITE-FILE"]
    # The subagent was told its call was denied (nobody could be asked) and went on.
    assert not (workspace / "made-in-sandbox.txt").exists()
    assert first_text(done) == "Task Succeeded. Result: wrote made-in-sandbox.txt"
    assert "no human is available" in json.dumps(requests[-1].body["messages"][-1])


@contextmanager
def http_server(
    settings: Settings, server: ScriptedModelServer, workspace: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        warden_argv(
            "mcp", "--http", "--port", "0", "--workspace", str(workspace), "--trust-workspace",
            *args,
        ),
        env=server_env(settings, server),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        url = ""
        for line in proc.stderr:
            if "serving MCP on " in line:
                url = line.split("serving MCP on ")[1].split()[0]
                break
        assert url, "warden mcp --http did not say where it listens"
        rest = threading.Thread(target=proc.stderr.read, daemon=True)  # never blocks it
        rest.start()
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def test_http_needs_the_secret_and_this_host_and_serves_a_session(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    results = tmp_path / "http.json"
    with (
        model_server() as server,
        http_server(
            settings,
            server,
            workspace,
            "--permission-mode",
            "default",
            "--result-file",
            str(results),
            "--idle-timeout",
            str(IDLE_S),
        ) as (proc, url),
    ):
        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with httpx2.AsyncClient() as raw:
            no_secret = await raw.post(url, json=hello)
            wrong = await raw.post(url, json=hello, headers={"Authorization": "Bearer wrong"})
            rebound = await raw.post(
                url,
                json=hello,
                headers={"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"},
            )
            foreign = await raw.post(
                url,
                json=hello,
                headers={"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"},
            )
        assert (no_secret.status_code, wrong.status_code) == (401, 401)
        assert "Authorization: Bearer" in no_secret.text
        assert rebound.status_code == 421 and foreign.status_code == 403

        asked = Asked("allow for this session")
        headers = {"Authorization": f"Bearer {TOKEN}"}

        async def session_with_a_task_left_running(answer: Asked, *, delete: bool = True) -> None:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=120) as client,
                streamable_http_client(url, http_client=client, terminate_on_close=delete) as (
                    read,
                    write,
                ),
                ClientSession(read, write, elicitation_callback=answer) as session,
            ):
                await session.initialize()
                assert {t.name for t in (await session.list_tools()).tools} == {
                    "Task", "TaskOutput", "TaskStop",
                }  # fmt: skip
                done = await session.call_tool(
                    "Task",
                    {"description": "write", "prompt": "WRITE-FILE", "subagent_type": "bash"},
                )
                assert first_text(done) == "Task Succeeded. Result: wrote made-in-sandbox.txt"
                started = await session.call_tool(
                    "Task",
                    {"description": "left", "prompt": "SLEEPER", "subagent_type": "bash",
                     "run_in_background": True},
                )  # fmt: skip
                assert not started.is_error
                await asyncio.sleep(1)

        # The client ends its session (DELETE) with a task running: the run ends, the
        # task is stopped as Ctrl-C stops it, its container is gone.
        await session_with_a_task_left_running(asked)
        # The Bash calls asked over HTTP: the foreground one on its call's stream.
        assert "made-in-sandbox.txt" in asked.messages[0]
        doc = await written(results)
        assert doc["status"] == "completed"
        assert sorted(t["status"] for t in doc["tasks"]) == ["completed", "stopped"]
        assert containers_of(doc["run_id"]) == []
        # A client that vanishes without ending its session (its event stream closed):
        # after --idle-timeout the session is over, and its run ends the same way.
        await session_with_a_task_left_running(Asked("allow"), delete=False)
        vanished = await written(tmp_path / "http-2.json")
        assert sorted(t["status"] for t in vanished["tasks"]) == ["completed", "stopped"]
        assert containers_of(vanished["run_id"]) == []
        # A third session is a third run; the server is stopped while it has a task
        # running: the run ends like Ctrl-C, and so does the server.
        await session_with_a_task_left_running(Asked("allow"))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 128 + signal.SIGTERM
    third = result_document(tmp_path / "http-3.json")
    assert len({doc["run_id"], vanished["run_id"], third["run_id"]}) == 3
    assert containers_of(third["run_id"]) == []


async def test_a_client_that_goes_away_mid_task_ends_the_server_quietly(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """The client process dies while its Task call runs (its pipes close under the
    server): the task is stopped, its container removed, the result document written,
    and `warden mcp` exits 0 without a traceback."""
    status, stderr, results = tmp_path / "status", tmp_path / "stderr", tmp_path / "session.json"
    with model_server() as server:
        argv = warden_argv("mcp", "--workspace", str(workspace), "--trust-workspace",
                           "--permission-mode", "bypassPermissions",
                           "--result-file", str(results))  # fmt: skip
        client = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.mcp_leaving_client", str(status),
             str(stderr), "--", *argv],
            env=server_env(settings, server), cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert client.stdout is not None
            assert client.stdout.readline().strip() == "calling"
            for _ in range(2400):  # until the subagent has asked for its `sleep` (mid-Task)
                if any(r.conversation == "SLEEPER" for r in server.requests):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the Task's subagent never asked the model")
        finally:
            client.kill()
            client.wait()
            if client.stdout is not None:
                client.stdout.close()
        for _ in range(2400):  # the server stops the task, removes it, writes, exits
            if status.exists() and status.read_text().strip():
                break
            await asyncio.sleep(0.05)
    said = stderr.read_text()
    assert status.read_text().strip() == "0", said
    assert "Traceback" not in said and "Error" not in said, said
    doc = result_document(results)
    assert [t["status"] for t in doc["tasks"]] == ["stopped"]
    assert containers_of(doc["run_id"]) == []
