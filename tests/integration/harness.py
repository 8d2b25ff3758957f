"""Drives real runs for integration tests: the scripted model server, a real
engine, real containers, the real anthropic SDK on both sides."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.config import Secret, Settings
from orchestrator.runtime.session import Run, open_run
from orchestrator.runtime.tasks import TaskInput, TaskResult
from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import UNPRIVILEGED, run_warden

API_KEY = "sk-ant-test-4f1c9e0d-THE-REAL-KEY-STAYS-ON-THE-HOST"
PARENT_MATCH = {"system_contains": "lead agent of warden"}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": tool_input}


def task(prompt: str, subagent_type: str = "general-purpose", **extra: Any) -> dict[str, Any]:
    return tool(
        "Task", description="test task", prompt=prompt, subagent_type=subagent_type, **extra
    )


def convo(name: str, match: dict[str, Any], *turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "match": match, "turns": [{"content": t} for t in turns]}


def fan_out(
    n: int, label: str, parent_turns: list[list[dict[str, Any]]], **task_extra: Any
) -> list[dict[str, Any]]:
    """A parent that starts n bash subagents in one turn; subagent i writes
    `{label}{i}.txt` holding i and answers `{label} i done`."""
    return [
        convo(
            "parent",
            PARENT_MATCH,
            [task(f"{label.upper()}-{i:02d}", "bash", **task_extra) for i in range(n)],
            *parent_turns,
        ),
        *[
            convo(
                f"{label}{i}",
                {"prompt_contains": f"{label.upper()}-{i:02d}"},
                [tool("Bash", command=f"echo {i} > {label}{i}.txt")],
                [text(f"{label} {i} done")],
            )
            for i in range(n)
        ],
    ]


@asynccontextmanager
async def scripted_run(
    settings: Settings,
    workspace: Path,
    conversations: list[dict[str, Any]],
    *,
    prompt: str = "test run",
    **run_kwargs: Any,
) -> AsyncIterator[tuple[Run, ScriptedModelServer]]:
    # These tests are about containers, not policy: unless a test says otherwise,
    # every tool call is allowed (the permission tests pass their own policy).
    run_kwargs.setdefault("mode", "bypassPermissions")
    # ... and the workspace's own settings apply, as in a workspace the person trusted.
    run_kwargs.setdefault("trusted", True)
    script = Script.model_validate({"conversations": conversations})
    async with ScriptedModelServer(script, expected_api_key=API_KEY) as server:
        configured = replace(
            settings, anthropic_base_url=server.base_url, anthropic_api_key=Secret(API_KEY)
        )
        async with open_run(configured, workspace=workspace, prompt=prompt, **run_kwargs) as run:
            yield run, server


def requests_of(server: ScriptedModelServer, conversation: str) -> list[Any]:
    return [r for r in server.requests if r.conversation == conversation]


def write_agent(workspace: Path, name: str, text_: str) -> None:
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.md").write_text(text_)
    owner = workspace.stat()
    for path in (workspace / ".claude", agents, agents / f"{name}.md"):
        os.chown(path, owner.st_uid, owner.st_gid)


def write_project_settings(workspace: Path, doc: dict[str, Any]) -> None:
    """`doc` as the workspace's `.claude/settings.json`, owned by the unprivileged
    user as a real project's would be."""
    claude = workspace / ".claude"
    claude.mkdir(exist_ok=True)
    (claude / "settings.json").write_text(json.dumps(doc))
    if os.geteuid() == 0:
        for path in (claude, claude / "settings.json"):
            os.chown(path, UNPRIVILEGED, UNPRIVILEGED)


AUTO_APPLY = (
    "--permission-mode", "bypassPermissions", "--isolation", "worktree", "--apply", "auto"
)  # fmt: skip
"""`warden run` flags of a CI job whose subagents each work in their own copy, each
change set applied (or refused) by policy with no person asked."""


def run_auto_apply(
    settings: Settings, workspace: Path, script: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    """`warden run --replay SCRIPT` on `workspace` with `AUTO_APPLY` and `flags`."""
    return run_warden(
        settings,
        "run", "go", "--replay", str(script), "--workspace", str(workspace), *AUTO_APPLY, *flags,
    )  # fmt: skip


def apply_records(audit_out: Path) -> list[dict[str, Any]]:
    """The `Apply` records of a run's `--audit-out` file."""
    return [r for r in json.loads(audit_out.read_text()) if r["tool_name"] == "Apply"]


def trust_hooks(settings: Settings, *commands: str) -> None:
    """The person's own settings (outside the workspace) trust these hook commands,
    so they run on the host instead of in a hook sandbox."""
    settings.config_dir.mkdir(parents=True, exist_ok=True)
    path = settings.config_dir / "settings.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.setdefault("warden", {}).setdefault("trustedHooks", []).extend(commands)
    path.write_text(json.dumps(doc))


def containers_of(session: str) -> list[Any]:
    import docker

    client = docker.from_env()
    try:
        return list(
            client.containers.list(
                ignore_removed=True, all=True, filters={"label": f"warden.session={session}"}
            )
        )
    finally:
        client.close()


async def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Wait for `check` to hold, polling; fail naming `what` after `timeout_s` (generous:
    these machines run loaded, and a wait is never a measurement)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:g} s")
        await asyncio.sleep(0.1)


async def until_made(path: Path, task: asyncio.Future[Any], timeout_s: float = 120) -> None:
    """Wait for the sandbox of `task` to make `path`; fail at once if `task` ends
    first (it never will), or naming `path` after `timeout_s`."""
    await until(lambda: path.exists() or task.done(), timeout_s, f"{path.name} being made")
    assert not task.done(), f"the task ended before it made {path.name}: {task.result()!r}"


@dataclass(frozen=True)
class Victim:
    """A bash subagent whose sandbox is up and busy (`a_victim_running`)."""

    run: Run
    task_id: str
    container_id: str
    running: asyncio.Task[TaskResult]
    """The task: it ends when something ends the sandbox."""


@asynccontextmanager
async def a_victim_running(settings: Settings, workspace: Path) -> AsyncIterator[Victim]:
    """A run whose one bash subagent is up: its sandbox made `victim.txt` and sleeps
    (a tool call of 10 minutes)."""
    script = [
        convo(
            "victim",
            {"prompt_contains": "VICTIM"},
            [tool("Bash", command="touch victim.txt; sleep 300", timeout=600000)],
            [text("never")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, _):
        running = asyncio.create_task(
            run.manager.run_task(TaskInput(description="v", prompt="VICTIM", subagent_type="bash"))
        )
        await until_made(workspace / "victim.txt", running)
        (ctx,) = run.manager.tasks.values()
        assert ctx.container_id is not None
        yield Victim(run, ctx.task_id, ctx.container_id, running)


def hold_command(marker: str) -> str:
    """A Bash command that says it is running (creates `marker` in the workspace) and
    then holds its sandbox until the test creates `marker + ".release"` (or 10 minutes
    pass), so a test acts while the sandbox is surely up, however slow the machine."""
    return (
        f"touch {marker}; for i in $(seq 6000); do "
        f"[ -e {marker}.release ] && break; sleep 0.1; done"
    )
