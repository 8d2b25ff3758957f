"""Smaller faults, each injected for real and answered with its own clear message: a
sandbox removed from outside (`docker rm -f`), a tool process OOM-killed inside a
sandbox that survives, a model endpoint that answers 200 with HTML, a damaged state
store, and a binary `--replay` file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import docker
import pytest
from aiohttp import web

from orchestrator.config import Secret, Settings
from orchestrator.runtime.outcome import REMOVED_ERROR
from orchestrator.runtime.session import open_run
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from orchestrator.store import Store
from tests.conftest import warden_argv, warden_env
from tests.integration.harness import (
    a_victim_running,
    convo,
    requests_of,
    scripted_run,
    text,
    tool,
    write_agent,
)

pytestmark = pytest.mark.integration


async def test_container_removed_from_outside_says_so(settings: Settings, workspace: Path) -> None:
    client = docker.from_env()
    async with a_victim_running(settings, workspace) as victim:
        await asyncio.to_thread(client.api.remove_container, victim.container_id, force=True)
        result = await asyncio.wait_for(victim.running, 60)
        stored = victim.run.store.get_task(result.task_id)
    client.close()
    assert result.status is TaskStatus.FAILED  # not `stopped`: nobody asked for a stop
    assert result.error == REMOVED_ERROR and "removed from outside warden" in result.render()
    assert stored.status == "failed" and stored.error == REMOVED_ERROR


async def test_oom_kill_inside_a_surviving_sandbox_is_named(
    settings: Settings, workspace: Path
) -> None:
    write_agent(
        workspace,
        "hog",
        "---\nname: hog\ndescription: eats memory\ntools: Bash\nmemory: 256m\n---\nYou eat.\n",
    )
    script = [
        convo(
            "hog",
            {"prompt_contains": "HOG"},
            [tool("Bash", command="python3 -c 'x = bytearray(1024 * 1024 * 1024)'; echo after")],
            [text("survived: {tool_results}")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="h", prompt="HOG", subagent_type="hog")
        )
    assert result.status is TaskStatus.COMPLETED, result.error  # the sandbox survived
    (tool_result,) = requests_of(server, "hog")[1].body["messages"][-1]["content"]
    assert tool_result["is_error"] is True
    assert "killed: out of memory (limit 256 MiB)" in tool_result["content"]


async def test_the_runner_is_never_the_oom_killers_choice(
    settings: Settings, workspace: Path
) -> None:
    """In a real sandbox, as its unprivileged user: a command's processes carry the
    highest oom_score_adj while the runner (their parent) keeps the default, so a
    small limit shared by many tool processes never takes the runner with it."""
    script = [
        convo(
            "scores",
            {"prompt_contains": "SCORES"},
            [tool("Bash", command="cat /proc/$$/oom_score_adj /proc/$PPID/oom_score_adj")],
            [text("scores: {tool_results}")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="s", prompt="SCORES", subagent_type="bash")
        )
    assert result.status is TaskStatus.COMPLETED, result.error
    (tool_result,) = requests_of(server, "scores")[1].body["messages"][-1]["content"]
    assert tool_result["content"].split("\n")[:2] == ["1000", "0"]


async def test_model_endpoint_answering_html_is_a_clear_task_error(
    settings: Settings, workspace: Path
) -> None:
    calls: list[str] = []

    async def html(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.Response(
            text="<html><body>Please log in</body></html>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_post("/v1/messages", html)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    configured = replace(
        settings, anthropic_base_url=f"http://127.0.0.1:{port}", anthropic_api_key=Secret("sk-test")
    )
    try:
        async with open_run(
            configured, workspace=workspace, prompt="p", mode="bypassPermissions"
        ) as run:
            result = await run.manager.run_task(
                TaskInput(description="h", prompt="anything", subagent_type="bash")
            )
    finally:
        await runner.cleanup()
    assert result.status is TaskStatus.FAILED
    assert result.error is not None
    assert "answered 200 with text/html" in result.error
    assert "ANTHROPIC_BASE_URL" in result.error and "crashed" not in result.error
    assert len(calls) == 1  # refused once, not retried: a login page does not fix itself


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        warden_argv(*args), env=warden_env(WARDEN_STATE_DIR=str(state), CI="true"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_damaged_store_and_binary_replay_are_one_clear_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    db = state / "warden.db"
    with Store.open(db) as store:
        store.create_run("r", prompt="p" * 5000, workspace="/w", model="m", pid=os.getpid())
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    conn.close()
    with db.open("r+b") as fh:
        fh.seek((page - 1) * 4096)
        fh.write(os.urandom(4096))
    for args in (["ps"], ["logs", "sa_x"], ["audit"]):
        proc = _cli(state, *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"warden: error: the state store {db} is damaged")
        assert "Move it aside" in proc.stderr and "Traceback" not in proc.stderr

    replay = tmp_path / "script.yaml"
    replay.write_bytes(bytes(range(256)) * 8)
    proc = _cli(tmp_path / "state2", "run", "go", "--replay", str(replay))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"warden: error: script {replay} is not UTF-8 text")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert json.dumps(proc.stdout) == '""'
