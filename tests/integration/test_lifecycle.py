"""Lifecycle of subagents: background tasks notify the parent's next turn,
TaskOutput and TaskStop work on them (stop kills the container and its
descendants at once), caps (and a full queue) refuse with their own message, sessions resume with
their full history in a new container, and an orchestrator killed mid-run is
recovered by the next one with nothing lost and nothing left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from orchestrator.config import Settings
from orchestrator.errors import WardenError
from orchestrator.runtime.caps import CapError, TaskManagerConfig
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.conftest import warden_argv, warden_env
from tests.integration.harness import (
    PARENT_MATCH,
    containers_of,
    convo,
    fan_out,
    requests_of,
    scripted_run,
    task,
    text,
    tool,
    until,
)

pytestmark = pytest.mark.integration

STOP_GRACE_S = 8.0
"""Under the engine's default 10 s stop timeout: a kill ends containers well before."""


def parent_turns(n: int) -> list[list[dict[str, Any]]]:
    return [[text(f"parent turn {i}: {{tool_results}}")] for i in range(n)]


async def test_background_task_notifies_the_parents_next_turn(
    settings: Settings, workspace: Path
) -> None:
    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [task("BG-WORK", "bash", run_in_background=True)],
            [text("I will wait for it.")],
            [text("final: got the notification")],
        ),
        convo(
            "bg",
            {"prompt_contains": "BG-WORK"},
            [tool("Bash", command="sleep 1; echo bg > bg.txt")],
            [text("background result 42")],
        ),
    ]
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.parent.run("go")
    parent = requests_of(server, "parent")
    started = json.dumps(parent[1].body["messages"][-1])
    assert "started in the background with id sa_" in started
    notified = json.dumps(parent[2].body["messages"][-1])
    assert "<task-notification>" in notified
    assert "background result 42" in notified
    assert result.text == "final: got the notification"
    assert (workspace / "bg.txt").exists()


async def test_task_output_with_and_without_blocking(settings: Settings, workspace: Path) -> None:
    script = [
        convo(
            "slow",
            {"prompt_contains": "SLOW"},
            [tool("Bash", command="sleep 2")],
            [text("slow result")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, _):
        ctx = await run.manager.start_background(
            TaskInput(description="slow", prompt="SLOW", subagent_type="bash")
        )
        call = {"id": "t1", "name": "TaskOutput", "input": {"task_id": ctx.task_id, "block": False}}
        early = await run.parent._call(call)
        call["input"] = {"task_id": ctx.task_id, "block": True, "timeout": 60000}
        late = await run.parent._call(call)
        unknown = await run.parent._call(
            {"id": "t2", "name": "TaskOutput", "input": {"task_id": "sa_0000"}}
        )
    assert "no result yet" in early["content"]
    assert "status: completed" in late["content"] and "slow result" in late["content"]
    assert unknown["is_error"] and "only if a Task call" in unknown["content"]


async def test_task_stop_kills_the_task_and_its_descendants_within_a_second(
    settings: Settings, workspace: Path
) -> None:
    script = [
        convo(
            "delegator",
            {"prompt_contains": "DELEGATOR"},
            [task("SLEEPER sleep", "bash")],
            [text("never")],
        ),
        convo(
            "sleeper",
            {"prompt_contains": "SLEEPER"},
            [tool("Bash", command="echo started > sleeper.txt; sleep 300", timeout=600000)],
            [text("never")],
        ),
    ]
    client = docker.from_env()
    async with scripted_run(settings, workspace, script, config=TaskManagerConfig(max_depth=2)) as (
        run,
        _,
    ):
        ctx = await run.manager.start_background(
            TaskInput(description="d", prompt="DELEGATOR", subagent_type="general-purpose")
        )
        await until((workspace / "sleeper.txt").exists, 60, "the sleeper's start")
        containers = [c.container_id for c in run.manager.tasks.values()]
        assert len(containers) == 2 and all(containers)
        began = time.monotonic()
        answer = await run.parent._call(
            {"id": "t", "name": "TaskStop", "input": {"task_id": ctx.task_id}}
        )

        def all_dead() -> bool:
            for cid in containers:
                try:
                    if client.api.inspect_container(cid)["State"]["Running"]:
                        return False
                except docker.errors.NotFound:
                    pass
            return True

        await until(all_dead, 30, "both containers killed")
        killed_after = time.monotonic() - began
        result = await run.manager.wait_for(ctx.task_id, 30)
        statuses = {c.agent_type: c.status for c in run.manager.tasks.values()}
        transcript = run.store.get_transcript(ctx.task_id)
        session = run.session
    client.close()
    # Killed, not stopped: a graceful stop would give each container the engine's
    # 10 s grace first. (The margin is wide so a loaded machine cannot fail it.)
    assert killed_after < STOP_GRACE_S, f"containers took {killed_after:.2f} s to die"
    assert "Stopped" in answer["content"]
    assert result is not None and result.status is TaskStatus.STOPPED
    assert statuses == {"general-purpose": TaskStatus.STOPPED, "bash": TaskStatus.STOPPED}
    assert transcript, "the partial transcript was not kept"
    assert containers_of(session) == []


async def test_caps_refuse_with_their_own_message(settings: Settings, workspace: Path) -> None:
    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [task("ONE-A", "bash"), task("ONE-B", "bash")],
            [text("{tool_results}")],
        ),
        convo(
            "one-a", {"prompt_contains": "ONE-A"}, [tool("Bash", command="sleep 2")], [text("a")]
        ),
        convo(
            "one-b", {"prompt_contains": "ONE-B"}, [tool("Bash", command="sleep 2")], [text("b")]
        ),
        convo(
            "greedy-parent",
            {"prompt_contains": "GREEDY"},
            [task("KID-1 hi", "bash")],
            [task("KID-2 hi", "bash")],
            [text("{last_tool_result}")],
        ),
        convo("kid", {"prompt_contains": "KID-"}, [text("kid done")]),
    ]
    total_cap = TaskManagerConfig(max_concurrent_total=1, queue_limit=0)
    async with scripted_run(settings, workspace, script, config=total_cap) as (run, _):
        result = await run.parent.run("fan out")
    assert "max_concurrent_total cap (1) reached and the queue is full" in result.text
    assert result.text.count("Task Succeeded") == 1

    children_cap = TaskManagerConfig(max_depth=2, max_children_per_task=1)
    async with scripted_run(settings, workspace, script, config=children_cap) as (run, _):
        greedy = await run.manager.run_task(
            TaskInput(description="g", prompt="GREEDY", subagent_type="general-purpose")
        )
        assert "max_children_per_task cap (1)" in greedy.text
        deepest = next(c for c in run.manager.tasks.values() if c.depth == 2)
        with pytest.raises(CapError, match="max_depth cap"):
            await run.manager.run_task(
                TaskInput(description="d", prompt="KID-3", subagent_type="bash"), parent=deepest
            )


async def test_resume_continues_with_full_history_in_a_new_container(
    settings: Settings, workspace: Path
) -> None:
    script = [
        convo(
            "first",
            {"prompt_contains": "REMEMBER"},
            [tool("Bash", command="echo 7 > secret.txt")],
            [text("I stored the number")],
            [text("The number was 7, from my earlier turn")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, _):
        first = await run.manager.run_task(
            TaskInput(description="remember", prompt="REMEMBER a number", subagent_type="bash")
        )
        first_container = run.manager.tasks[first.task_id].container_id
    # A new orchestrator (new run) resumes the session.
    async with scripted_run(settings, workspace, script) as (run, server):
        second = await run.manager.run_task(
            TaskInput(
                description="resume",
                prompt="What was the number?",
                subagent_type="bash",
                session_id=first.session_id,
            )
        )
        second_container = run.manager.tasks[second.task_id].container_id
    assert second.status is TaskStatus.COMPLETED
    assert second.text == "The number was 7, from my earlier turn"
    assert second.session_id == first.session_id and second.task_id != first.task_id
    assert second_container != first_container
    resumed = requests_of(server, "first")[0].body["messages"]
    roles = [m["role"] for m in resumed]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert "What was the number?" in json.dumps(resumed[-1])


async def test_unknown_session_is_a_clear_error(settings: Settings, workspace: Path) -> None:
    unused = [convo("unused", {}, [text("never asked")])]
    async with scripted_run(settings, workspace, unused) as (run, _):
        with pytest.raises(WardenError, match="no subagent session"):
            await run.manager.run_task(
                TaskInput(description="r", prompt="x", subagent_type="bash", session_id="sa_nope")
            )


def test_orchestrator_killed_mid_task_is_recovered_and_resumable(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = {
        "conversations": [
            {
                "name": "parent",
                "match": PARENT_MATCH,
                "turns": [{"content": [task("CRASHY work", "bash")]}, {"content": [text("x")]}],
            },
            {
                "name": "crashy",
                "match": {"prompt_contains": "CRASHY"},
                "turns": [
                    {"content": [tool("Bash", command="echo one > one.txt")]},
                    {"content": [tool("Bash", command="sleep 300", timeout=600000)]},
                    {"content": [text("resumed fine")]},
                ],
            },
        ]
    }
    script_path = tmp_path / "script.yaml"
    script_path.write_text(yaml.safe_dump(script))
    env = warden_env(
        WARDEN_STATE_DIR=str(settings.state_dir),
        WARDEN_CONFIG_DIR=str(settings.config_dir),
        CI="true",
    )
    argv = warden_argv(
        "run", "go", "--replay", str(script_path), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions",
    )  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    from orchestrator.store import Store

    store = Store.open(settings.state_dir / "warden.db")
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()
            tasks = store.list_tasks()
            # 4 messages: the model has asked for `sleep 300` (a resume then goes on
            # with the next turn instead of sleeping again).
            if tasks and len(store.get_transcript(tasks[0].task_id)) >= 4:
                break
            assert time.monotonic() < deadline, "the task never reached its second turn"
            time.sleep(0.1)
        run_id = tasks[0].run_id
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        assert containers_of(run_id), "the crash should have left the container running"
        before = store.get_transcript(tasks[0].task_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        store.close()

    async def recover_and_resume() -> tuple[Any, Any, list[Any]]:
        resume_script = [convo("crashy", {"prompt_contains": "CRASHY"}, *[
            [t] for t in [tool("Bash", command="echo one > one.txt"),
                          tool("Bash", command="sleep 300", timeout=600000),
                          text("resumed fine")]
        ])]  # fmt: skip
        async with scripted_run(settings, workspace, resume_script) as (run, _):
            interrupted = run.store.get_task(tasks[0].task_id)
            leftovers = containers_of(run_id)
            resumed = await run.manager.run_task(
                TaskInput(
                    description="resume",
                    prompt="carry on",
                    subagent_type="bash",
                    session_id=tasks[0].session_id,
                )
            )
        return interrupted, resumed, leftovers

    interrupted, resumed, leftovers = asyncio.run(recover_and_resume())
    assert interrupted.status == "interrupted"
    assert leftovers == []
    with Store.open(settings.state_dir / "warden.db") as store:
        assert store.get_transcript(tasks[0].task_id) == before
        assert store.get_run(run_id).status == "interrupted"
    assert resumed.status is TaskStatus.COMPLETED and resumed.text == "resumed fine"


def test_ctrl_c_stops_everything_and_says_so(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = {
        "conversations": [
            {
                "name": "parent",
                "match": PARENT_MATCH,
                "turns": [{"content": [task("NAPPER", "bash")]}],
            },
            {
                "name": "napper",
                "match": {"prompt_contains": "NAPPER"},
                "turns": [
                    {"content": [tool("Bash", command="touch nap.txt; sleep 300", timeout=600000)]}
                ],
            },
        ]
    }
    script_path = tmp_path / "script.yaml"
    script_path.write_text(yaml.safe_dump(script))
    env = warden_env(WARDEN_STATE_DIR=str(settings.state_dir), CI="true")
    argv = warden_argv(
        "run", "go", "--replay", str(script_path), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions",
    )  # fmt: skip
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (workspace / "nap.txt").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert "interrupted: stopped 1 subagent(s)" in err
    from orchestrator.store import Store

    with Store.open(settings.state_dir / "warden.db") as store:
        run = store.list_runs()[0]
        assert run.status == "stopped"
        assert [t.status for t in store.list_tasks(run_id=run.run_id)] == ["stopped"]
        assert containers_of(run.run_id) == []


async def test_twenty_background_subagents_leave_nothing_behind(
    settings: Settings, workspace: Path
) -> None:
    n = 20
    script = fan_out(n, "bgw", parent_turns(n + 2), run_in_background=True)
    async with scripted_run(settings, workspace, script) as (run, _):
        result = await run.parent.run("fan out in the background")
        session = run.session
    assert sorted(r.text for r in result.tasks) == sorted(f"bgw {i} done" for i in range(n))
    assert all(r.status is TaskStatus.COMPLETED for r in result.tasks)
    for i in range(n):
        assert (workspace / f"bgw{i}.txt").read_text() == f"{i}\n"
    assert containers_of(session) == []
