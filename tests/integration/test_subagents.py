"""Subagents run their own loop in their own container: context isolation,
persistent file effects, parallelism, deadlines, host-enforced turn caps, the
API key never entering a container, and hostile containers not disturbing the
host. Real engine, real images, real anthropic SDK; only the model is scripted."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import (
    API_KEY,
    PARENT_MATCH,
    containers_of,
    convo,
    fan_out,
    requests_of,
    scripted_run,
    task,
    text,
    tool,
    write_agent,
)
from tests.json_shapes import arr, obj

pytestmark = pytest.mark.integration


def all_text(value: Any) -> str:
    return json.dumps(value)


async def test_subagent_sees_only_its_prompt_and_its_files_persist(
    settings: Settings, workspace: Path
) -> None:
    child_prompt = "Write hello to out.txt. CHILD-MARKER"
    script = [
        convo("parent", PARENT_MATCH, [text("delegating"), task(child_prompt)], [text("all done")]),
        convo(
            "child",
            {"prompt_contains": "CHILD-MARKER"},
            [tool("Write", file_path="/workspace/out.txt", content="hello\n")],
            [text("wrote out.txt")],
        ),
    ]
    secret = "PARENT-ONLY-CONTEXT-9137"
    async with scripted_run(settings, workspace, script, prompt=secret) as (run, server):
        result = await run.parent.run(f"Please delegate. {secret}")
        session = run.session

    assert result.text == "all done"
    first = requests_of(server, "child")[0].body
    assert secret not in all_text(first)
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert child_prompt in all_text(first["messages"][0])
    assert "lead agent" not in all_text(first["system"])
    # The parent got only the final answer, in the stable format.
    second_parent = requests_of(server, "parent")[1].body
    assert "Task Succeeded. Result: wrote out.txt" in all_text(second_parent["messages"][-1])
    # The file outlives the container, owned by the workspace owner.
    out = workspace / "out.txt"
    assert out.read_text() == "hello\n"
    assert out.stat().st_uid == workspace.stat().st_uid
    assert containers_of(session) == []


async def test_two_subagents_run_in_parallel_on_one_workspace(
    settings: Settings, workspace: Path
) -> None:
    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [task("ALPHA write a.txt"), task("BETA write b.txt", "bash")],
            [text("{tool_results}")],
        ),
        convo(
            "alpha",
            {"prompt_contains": "ALPHA"},
            [tool("Bash", command="sleep 1; echo a > a.txt")],
            [text("alpha done")],
        ),
        convo(
            "beta",
            {"prompt_contains": "BETA"},
            [tool("Bash", command="sleep 1; echo b > b.txt")],
            [text("beta done")],
        ),
    ]
    async with scripted_run(settings, workspace, script) as (run, _):
        result = await run.parent.run("go")
        events = [json.loads(line) for line in run.events_path.read_text().splitlines()]

    assert "alpha done" in result.text and "beta done" in result.text
    assert (workspace / "a.txt").read_text() == "a\n"
    assert (workspace / "b.txt").read_text() == "b\n"
    started = [e["ts"] for e in events if e["kind"] == "task_started"]
    finished = [e["ts"] for e in events if e["kind"] == "task_completed"]
    assert len(started) == 2 and max(started) < min(finished), "the two ran one after the other"
    kinds = {e["kind"] for e in events}
    assert {"task_started", "task_running", "task_completed"} <= kinds
    assert all(e["trace_id"] for e in events if e["kind"].startswith("task_"))


DEADLINE_S = 20
"""Long enough for a cold sandbox to start and write its file on a loaded 2-core
machine (the runner's start alone took up to 4 s there), short next to `sleep 300`."""


async def test_deadline_kills_the_container_and_keeps_work_done(
    settings: Settings, workspace: Path
) -> None:
    write_agent(
        workspace,
        "sleeper",
        f"---\nname: sleeper\ndescription: sleeps\ntools: Bash, Write\ntimeout: {DEADLINE_S}\n---\nYou sleep.\n",
    )
    script = [
        convo(
            "sleeper",
            {"prompt_contains": "SLEEP"},
            [tool("Write", file_path="/workspace/before.txt", content="kept")],
            [tool("Bash", command="sleep 300", timeout=600000)],
            [text("never reached")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, _):
        began = time.monotonic()
        result = await run.manager.run_task(
            TaskInput(description="sleep", prompt="SLEEP now", subagent_type="sleeper")
        )
        elapsed = time.monotonic() - began
        transcript = run.store.get_transcript(result.task_id)
        session = run.session

    assert result.status is TaskStatus.TIMED_OUT
    assert result.render() == f"Task timed out after {DEADLINE_S} s."
    assert elapsed < DEADLINE_S + 10
    assert (workspace / "before.txt").read_text() == "kept"
    # The transcript up to the last model turn is kept.
    assert any(
        obj(b).get("name") == "Bash"
        for m in transcript
        if m["role"] == "assistant"
        for b in arr(m["content"])
    )
    assert containers_of(session) == []


GREEDY_RUNNER = r"""
import http.client, json, socket, sys

class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect("/run/warden/broker.sock")

def post(path, body, raw=None):
    conn = UnixConnection("warden-broker")
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"content-type": "application/json"})
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response.status, payload

statuses = []
for _ in range(10):
    body = {"model": "x", "max_tokens": 100, "messages": [{"role": "user", "content": "GREEDY"}]}
    statuses.append(post("/v1/messages", body)[0])
post("/v1/result", {"status": "completed", "text": json.dumps(statuses)})
"""


async def test_max_turns_holds_when_the_runner_ignores_it(
    settings: Settings, workspace: Path
) -> None:
    (workspace / "greedy.py").write_text(GREEDY_RUNNER)
    script = [convo("greedy", {"prompt_contains": "GREEDY"}, *[[text("more")]] * 20)]
    async with scripted_run(
        settings, workspace, script, runner_command=("python3", "/workspace/greedy.py")
    ) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="greedy", prompt="x", subagent_type="bash", max_turns=3)
        )
    assert result.status is TaskStatus.COMPLETED, result
    assert json.loads(result.text) == [200, 200, 200] + [403] * 7
    assert len(requests_of(server, "greedy")) == 3


async def test_api_key_never_enters_the_container(settings: Settings, workspace: Path) -> None:
    import docker

    probe = (
        "env > /workspace/env.txt; tr '\\0' '\\n' < /proc/1/environ > /workspace/environ.txt; "
        "ls -la /run/warden > /workspace/run.txt; cat /proc/self/mountinfo > /workspace/mounts.txt"
    )
    script = [
        convo(
            "probe", {"prompt_contains": "PROBE"}, [tool("Bash", command=probe)], [text("probed")]
        )
    ]
    inspected: list[dict[str, Any]] = []
    client = docker.from_env()

    def on_event(event: Any) -> None:
        if event.kind == "task_started":
            container = client.api.inspect_container(event.data["container_id"])
            found = client.images.get(container["Image"])
            image, history = found.attrs, found.history()
            inspected.append({"container": container, "image": image, "history": history})

    async with scripted_run(settings, workspace, script) as (run, server):
        run.events.subscribe(on_event)
        result = await run.manager.run_task(
            TaskInput(description="probe", prompt="PROBE", subagent_type="general-purpose")
        )
    client.close()

    assert result.status is TaskStatus.COMPLETED
    # The key did reach the model endpoint, from the host.
    assert all(r.api_key_matched for r in server.requests)
    assert inspected, "the container was not inspected while it ran"
    assert API_KEY not in json.dumps(inspected)
    for name in ("env.txt", "environ.txt", "run.txt", "mounts.txt"):
        content = (workspace / name).read_text()
        assert content, name
        assert API_KEY not in content
        assert "sk-ant" not in content
    assert "ANTHROPIC_API_KEY" not in (workspace / "env.txt").read_text()
    assert "broker.sock" in (workspace / "run.txt").read_text()


HOSTILE_RUNNER = r"""
import http.client, json, socket, threading

class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect("/run/warden/broker.sock")

def post(path, raw, ctype="application/json"):
    try:
        conn = UnixConnection("warden-broker", timeout=30)
        conn.request("POST", path, body=raw, headers={"content-type": ctype})
        r = conn.getresponse(); r.read(); conn.close()
        return r.status
    except Exception as exc:
        return repr(exc)

seen = []
seen.append(post("/v1/messages", b"{not json"))
seen.append(post("/v1/messages", b"\xff\xfe\x00garbage"))
seen.append(post("/v1/permission", json.dumps({"tool_name": "Bash"}).encode()))
seen.append(post("/v1/permission", json.dumps({"tool_use_id": "x", "tool_name": "Bash", "tool_input": {"command": "x" * 300000}}).encode()))
seen.append(post("/v1/transcript", b"[" + b"1," * (5 * 1024 * 1024) + b"1]"))
seen.append(post("/v1/events", json.dumps({"kind": "log", "detail": "\x1b[2J" * 5000}).encode()))
seen.append(post("/v1/result", json.dumps({"status": "completed", "text": 5}).encode()))
# Many connections at once.
threads = [threading.Thread(target=post, args=("/v1/events", b"{}")) for _ in range(50)]
[t.start() for t in threads]; [t.join() for t in threads]
# A connection that sends half a request and stalls, left open.
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect("/run/warden/broker.sock")
s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
post("/v1/result", json.dumps({"status": "completed", "text": json.dumps(seen)}).encode())
"""


async def test_hostile_container_does_not_disturb_host_or_other_subagents(
    settings: Settings, workspace: Path
) -> None:
    (workspace / "hostile.py").write_text(HOSTILE_RUNNER)
    script = [
        convo(
            "normal",
            {"prompt_contains": "NORMAL"},
            [tool("Bash", command="sleep 2; echo fine > fine.txt")],
            [text("normal done")],
        )
    ]
    async with (
        scripted_run(settings, workspace, script) as (normal_run, _),
        scripted_run(
            settings, workspace, script, runner_command=("python3", "/workspace/hostile.py")
        ) as (hostile_run, _),
    ):
        normal, hostile = await asyncio.gather(
            normal_run.manager.run_task(
                TaskInput(description="n", prompt="NORMAL", subagent_type="bash")
            ),
            hostile_run.manager.run_task(
                TaskInput(description="h", prompt="HOSTILE", subagent_type="bash")
            ),
        )
        rejected = [
            e
            for e in hostile_run.store.events(task_id=hostile.task_id)
            if e.kind == "broker_rejected"
        ]

    assert normal.status is TaskStatus.COMPLETED and normal.text == "normal done"
    assert (workspace / "fine.txt").read_text() == "fine\n"
    assert hostile.status is TaskStatus.COMPLETED, hostile
    statuses = json.loads(hostile.text)
    assert statuses[:4] == [400, 400, 400, 413]
    # Refused unread: the client sees the 413, or the connection closing on it.
    assert statuses[4] == 413 or "Error" in str(statuses[4])
    assert statuses[5:7] == [400, 400]
    assert len(rejected) >= 7


async def test_ten_subagents_in_parallel_leave_nothing_behind(
    settings: Settings, workspace: Path
) -> None:
    n = 10
    script = fan_out(n, "worker", [[text("{tool_results}")]])
    async with scripted_run(settings, workspace, script) as (run, _):
        result = await run.parent.run("fan out")
        session = run.session
        statuses = [r.status for r in result.tasks]

    assert statuses == [TaskStatus.COMPLETED] * n
    for i in range(n):
        assert (workspace / f"worker{i}.txt").read_text() == f"{i}\n"
        assert f"worker {i} done" in result.text
    assert containers_of(session) == []


async def test_claude_code_agent_file_defines_a_restricted_subagent(
    settings: Settings, workspace: Path
) -> None:
    write_agent(
        workspace,
        "code-reviewer",
        '---\nname: code-reviewer\ndescription: "Expert code review specialist. Use '
        'PROACTIVELY after code changes.\\n<example>\\nuser: review my change\\n</example>"\n'
        "tools: Read, Grep, Glob\nmodel: inherit\ncolor: purple\n---\n"
        "You are a senior code reviewer.\n\nReview carefully.\nREVIEWER-SYSTEM\n",
    )
    (workspace / "code.py").write_text("print('hi')\n")
    script = [
        convo(
            "reviewer",
            {"system_contains": "REVIEWER-SYSTEM"},
            [tool("Read", file_path="/workspace/code.py"), tool("Bash", command="touch pwned")],
            [text("{tool_results}")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="review", prompt="review code.py", subagent_type="code-reviewer")
        )
    assert result.status is TaskStatus.COMPLETED
    assert "print('hi')" in result.text
    assert "not available" in result.text
    assert not (workspace / "pwned").exists()
    tools = {t["name"] for t in requests_of(server, "reviewer")[0].body["tools"]}
    assert tools == {"Read", "Grep", "Glob"}


async def test_overload_is_retried_by_the_sdk_and_a_spend_limit_ends_the_task(
    settings: Settings, workspace: Path
) -> None:
    overloaded_once = {
        "name": "flaky",
        "match": {"prompt_contains": "FLAKY"},
        "turns": [
            {
                "content": [text("answered after one retry")],
                "error": {"status": 529, "message": "Overloaded", "retry_after_s": 0.2, "times": 1},
            }
        ],
    }
    broke = {
        "name": "broke",
        "match": {"prompt_contains": "BROKE"},
        "turns": [
            {
                "error": {
                    "status": 400,
                    "message": "Your credit balance is too low to access the Anthropic API.",
                }
            }
        ],
    }
    async with scripted_run(settings, workspace, [overloaded_once, broke]) as (run, server):
        flaky = await run.manager.run_task(
            TaskInput(description="f", prompt="FLAKY", subagent_type="bash")
        )
        spent = await run.manager.run_task(
            TaskInput(description="b", prompt="BROKE", subagent_type="bash")
        )
    assert flaky.status is TaskStatus.COMPLETED and flaky.text == "answered after one retry"
    assert [r.status for r in requests_of(server, "flaky")] == [529, 200]
    assert spent.status is TaskStatus.FAILED
    assert "credit balance is too low" in (spent.error or "")
    assert len(requests_of(server, "broke")) == 1, "a spend-limit error must not be retried"
