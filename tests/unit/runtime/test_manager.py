"""A task's life on the host, without Docker: the real TaskManager, broker, gate,
event log, store and upstream (the anthropic SDK against the scripted model
server), with `FakeBackend` standing in for the engine and a thread speaking the
broker's wire protocol standing in for the runner inside the container.

Locks in what a user relies on: a task's result, status, tokens and records; the
deadline ends it as timed_out; a runner that gives no answer is a failure that
says why; a denied tool is denied, audited and reported; the depth and children
caps refuse before anything starts; a stop is a stop; events come in order; the
parent loop delegates and gets back only the subagent's final answer; no
container outlives its task; warming sandboxes never makes the loop wait for an
image to be resolved.

Isolation is not claimed here (nothing runs in a container): the integration
tests prove that against a real engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anthropic
import pytest

from orchestrator.agents.definition import AgentDefinition
from orchestrator.agents.registry import AgentRegistry
from orchestrator.backend.contract import SandboxResult, SandboxSpec, SandboxStatus
from orchestrator.backend.fake import FakeBackend, FakeOutcome
from orchestrator.broker import Upstream
from orchestrator.config import Settings
from orchestrator.errors import ImageNotFoundError
from orchestrator.images.choice import SandboxImage
from orchestrator.permissions import load_hooks, load_policy
from orchestrator.permissions.approvers import NonInteractiveApprover
from orchestrator.results.models import Event
from orchestrator.results.parent_transcript import ObservedClient
from orchestrator.runtime.caps import CapError, TaskManagerConfig
from orchestrator.runtime.events import EventLog
from orchestrator.runtime.gate import PolicyGate
from orchestrator.runtime.manager import TaskManager
from orchestrator.runtime.parent import ParentAgent
from orchestrator.runtime.protocols import ImageResolver, PermissionGate
from orchestrator.runtime.sandbox import RUNNER_COMMAND
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from orchestrator.scripted import (
    Conversation,
    Match,
    Script,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
    Turn,
)
from orchestrator.store import Store
from sandbox_tools import wire
from sandbox_tools.http1 import UnixConnection

RUN_ID = "run_unit"
SESSION = "test-task-manager"

Runner = Callable[["Wire"], None]


class BrokerRefused(Exception):
    """The broker answered a stand-in runner's request with an HTTP error."""


"""What the fake container's runner does, given its connection to the broker."""


class Wire:
    """The runner's side of the broker socket: plain JSON over HTTP with the standard
    library, through the runner's own connection class (one connection per request,
    closed when answered, so no socket outlives its request)."""

    def __init__(self, socket_dir: Path) -> None:
        self.socket_path = str(socket_dir / Path(wire.BROKER_SOCKET).name)

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        conn = UnixConnection(self.socket_path, wire.BROKER_HOST)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {} if body is None else {"Content-Type": "application/json"}
            response = conn.exchange(method, path, payload, headers, 30)
        finally:
            conn.close()
        if response.status >= 400:
            raise BrokerRefused(f"{method} {path}: HTTP {response.status}: {response.body[:200]!r}")
        return dict(json.loads(response.body))

    def get(self, path: str) -> dict[str, Any]:
        return self._request("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, body)

    def permission(self, tool: str, **tool_input: Any) -> dict[str, Any]:
        body = {"tool_use_id": "tu_1", "tool_name": tool, "tool_input": tool_input}
        return self.post("/v1/permission", body)

    def model_call(self, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "model": spec["model"],
            "max_tokens": 64,
            "messages": [{"role": "user", "content": spec["prompt"]}],
        }
        return self.post("/v1/messages", body)

    def result(self, text: str, status: str = "completed") -> None:
        self.post("/v1/result", {"status": status, "text": text})


class RunnerBackend(FakeBackend):
    """A FakeBackend whose container is a thread running `runner` against the
    task's broker socket; the container exits (code 0) when the runner returns."""

    def __init__(self, runner: Runner) -> None:
        super().__init__(lambda spec: FakeOutcome(run_s=float("inf")))
        self.runner = runner
        self.exited: dict[str, threading.Event] = {}
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self, spec: SandboxSpec) -> str:
        container_id = super().start(spec)
        socket_dir = next(m.source for m in spec.mounts if m.target == wire.BROKER_SOCKET_DIR)
        done = self.exited[container_id] = threading.Event()
        thread = threading.Thread(target=self._run, args=(socket_dir, done), daemon=True)
        self.threads.append(thread)
        thread.start()
        return container_id

    def _run(self, socket_dir: Path, done: threading.Event) -> None:
        try:
            self.runner(Wire(socket_dir))
        except (OSError, http.client.HTTPException):
            pass  # the broker went away: the container was killed
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            done.set()

    def wait(self, container_id: str, timeout_s: float | None) -> SandboxResult:
        done = self.exited[container_id]
        if done.wait(timeout_s) and not self._get(container_id).killed:
            return SandboxResult(
                status=SandboxStatus.OK,
                exit_code=0,
                stdout="",
                stderr="",
                truncated=False,
                duration_s=0.0,
            )
        return super().wait(container_id, 0)  # killed: KILLED; deadline: TIMED_OUT

    def kill(self, container_id: str) -> None:
        super().kill(container_id)
        if container_id in self.exited:
            self.exited[container_id].set()


@dataclass
class Harness:
    manager: TaskManager
    backend: RunnerBackend
    store: Store
    events: list[Event] = field(default_factory=list)

    def kinds(self, task_id: str | None = None) -> list[str]:
        return [e.kind for e in self.events if task_id is None or e.task_id == task_id]


def agent(name: str = "worker", **fields: Any) -> AgentDefinition:
    base: dict[str, Any] = {
        "name": name,
        "description": "a test agent",
        "system_prompt": "You are a test agent.",
        "tools": ("Bash", "Read"),
        "timeout_s": 30.0,
    }
    return AgentDefinition.model_validate({**base, **fields})


SCRIPT = {
    "conversations": [
        {
            "name": "any",
            "match": {},
            "turns": [{"content": [{"type": "text", "text": "model says hi"}]}],
        }
    ]
}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(Script.model_validate(SCRIPT)) as running:
        yield running


@pytest.fixture
def make(tmp_path: Path, server: ScriptedModelServer) -> Callable[..., AsyncIterator[Harness]]:
    """`async with make(runner, ...) as h`: a manager whose containers run `runner`."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def build(
        runner: Runner,
        *,
        agents: tuple[AgentDefinition, ...] = (agent(),),
        gate: PermissionGate | None = None,
        config: TaskManagerConfig | None = None,
        model_server: ScriptedModelServer | None = None,
        image_resolver: ImageResolver | None = None,
        warm_pool: bool = False,
    ) -> AsyncIterator[Harness]:
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        state = Path(tempfile.mkdtemp(dir=tmp_path, prefix="state-"))
        store = Store.open(state / "warden.db")
        store.create_run(RUN_ID, prompt="p", workspace=str(workspace), model="m", pid=1)
        events = EventLog(RUN_ID, state / "events.jsonl", store)
        backend = RunnerBackend(runner)
        base_url = (model_server or server).base_url
        client = anthropic.AsyncAnthropic(base_url=base_url, api_key="k", max_retries=0)
        manager = TaskManager(
            backend=backend,
            registry=AgentRegistry(list(agents)),
            upstream=Upstream(client=client),
            events=events,
            store=store,
            workspace=workspace,
            session=SESSION,
            run_id=RUN_ID,
            trace_id="trace",
            default_model="test-model",
            image_resolver=image_resolver
            or (lambda agent: SandboxImage(name="agent", ref="image-agent")),
            gate=gate,
            config=config or TaskManagerConfig(warm_pool_size=0),
            # The warm pool is on only for warden's own runner.
            runner_command=RUNNER_COMMAND if warm_pool else ("fake-runner",),
        )
        harness = Harness(manager, backend, store)
        events.subscribe(harness.events.append)
        try:
            yield harness
        finally:
            await manager.close()
            await client.close()
            store.close()
            for thread in backend.threads:  # their sockets are closed before the next test
                await asyncio.to_thread(thread.join, 10)
            assert not backend.errors, backend.errors
            assert backend.list({}) == [], "a container outlived its task"

    return build  # type: ignore[return-value]


def task(prompt: str = "do it", subagent_type: str = "worker", **extra: Any) -> TaskInput:
    return TaskInput(description="test", prompt=prompt, subagent_type=subagent_type, **extra)


async def test_a_completed_task_gives_its_answer_tokens_and_records(make: Any) -> None:
    seen: dict[str, Any] = {}

    def runner(w: Wire) -> None:
        spec = seen["spec"] = w.get("/v1/spec")
        reply = w.model_call(spec)
        w.result(f"done: {reply['content'][0]['text']}")

    async with make(runner) as h:
        result = await h.manager.run_task(task("count the files"))
        assert result.status is TaskStatus.COMPLETED
        assert result.text == "done: model says hi"
        assert not result.is_error and result.render() == f"Task Succeeded. Result: {result.text}"
        assert result.tokens > 0 and result.turns == 1  # counted by the broker, not the runner
        # The runner was told the prompt, its own tools and the model; never Task at depth 1.
        assert seen["spec"]["prompt"] == "count the files"
        assert seen["spec"]["tools"] == ["Bash", "Read"]
        assert seen["spec"]["model"] == "test-model"
        row = h.store.get_task(result.task_id)
        assert (row.status, row.result_text, row.tokens) == (
            "completed",
            result.text,
            result.tokens,
        )
        # The model's text, streamed from the API, is a progress event of the task.
        assert h.kinds(result.task_id) == ["task_started", "task_running", "task_completed"]
        said = [e for e in h.events if e.task_id == result.task_id and e.kind == "task_running"]
        assert said[0].data["event"] == "model_text" and said[0].data["detail"] == "model says hi"
        assert result.usage["output_tokens"] > 0
        (spec,) = h.backend.started
        assert spec.image == "image-agent" and spec.user != "0:0"
        assert spec.warden_labels["warden.task"] == result.task_id


async def test_the_deadline_ends_a_task_as_timed_out(make: Any) -> None:
    release = threading.Event()

    def runner(w: Wire) -> None:
        w.get("/v1/spec")
        release.wait(30)  # never answers by itself

    async with make(runner, agents=(agent(timeout_s=0.3),)) as h:
        result = await h.manager.run_task(task())
        release.set()
        assert result.status is TaskStatus.TIMED_OUT
        assert result.render() == "Task timed out after 0.3 s."
        assert h.store.get_task(result.task_id).status == "timed_out"
        assert h.kinds(result.task_id)[-1] == "task_timed_out"


@pytest.mark.parametrize(
    ("answer", "status", "render"),
    [
        (None, TaskStatus.FAILED, "without a result"),
        ("   ", TaskStatus.NO_OUTPUT, "Task completed but returned no output."),
    ],
)
async def test_a_runner_without_an_answer_is_not_a_success(
    make: Any, answer: str | None, status: TaskStatus, render: str
) -> None:
    def runner(w: Wire) -> None:
        if answer is not None:
            w.result(answer)

    async with make(runner) as h:
        result = await h.manager.run_task(task())
        assert result.status is status
        assert render in result.render()


async def test_a_denied_tool_is_denied_audited_and_reported(make: Any, tmp_path: Path) -> None:
    answers: list[dict[str, Any]] = []

    def runner(w: Wire) -> None:
        answers.append(w.permission("Bash", command="rm -rf /workspace/src"))
        answers.append(w.permission("Read", file_path="/workspace/README"))
        w.result("gave up")

    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    (tmp_path / "ws").mkdir()
    gate = PolicyGate(
        policy=load_policy(settings, tmp_path / "ws", deny=("Bash(rm:*)",), mode="default"),
        hooks=load_hooks(settings, tmp_path / "ws"),
        workspace_host=tmp_path / "ws",
        approver=NonInteractiveApprover(),
    )
    async with make(runner, gate=gate) as h:
        gate.store, gate.events = h.store, h.manager.events
        result = await h.manager.run_task(task())
        assert result.status is TaskStatus.COMPLETED
        assert answers[0]["behavior"] == "deny" and "Bash(rm:*)" in answers[0]["reason"]
        assert answers[1]["behavior"] == "allow"  # reading is allowed by the default mode
        denied = [e for e in h.events if e.kind == "permission_denied"]
        assert [e.data["tool_name"] for e in denied] == ["Bash"]
        audit = h.store.audit(RUN_ID)
        assert [(a.tool_name, a.final) for a in audit] == [("Bash", "deny"), ("Read", "allow")]


async def test_caps_refuse_before_anything_starts(make: Any) -> None:
    nested: list[dict[str, Any]] = []

    def runner(w: Wire) -> None:
        spec = w.get("/v1/spec")
        if spec["prompt"] == "outer":
            nested.append(
                w.post("/v1/task", {"tool_use_id": "tu", "input": task("inner").model_dump()})
            )
            nested.append(
                w.post("/v1/task", {"tool_use_id": "tu", "input": task("inner").model_dump()})
            )
        w.result(f"answer to {spec['prompt']}")

    config = TaskManagerConfig(warm_pool_size=0, max_depth=2, max_children_per_task=1)
    delegating = agent(tools=("Bash", "Task"))
    async with make(runner, agents=(delegating,), config=config) as h:
        outer = await h.manager.run_task(task("outer"))
        assert outer.status is TaskStatus.COMPLETED
        assert nested[0] == {"text": "Task Succeeded. Result: answer to inner", "is_error": False}
        assert nested[1]["is_error"] and "max_children_per_task cap (1)" in nested[1]["text"]
        assert len(h.backend.started) == 2  # the refused child never got a container
    async with make(runner, agents=(delegating,), config=TaskManagerConfig(warm_pool_size=0)) as h:
        assert (await h.manager.run_task(task("outer"))).status is TaskStatus.COMPLETED
        # At max_depth 1 the runner is not offered Task and its broker refuses it ...
        assert nested[2]["is_error"] and "may not delegate" in nested[2]["text"]
        assert len(h.backend.started) == 1
        # ... and the manager refuses a child of a depth-1 task whoever asks.
        with pytest.raises(CapError, match="max_depth"):
            await h.manager.run_task(task(), parent=next(iter(h.manager.tasks.values())))


async def test_a_stopped_task_is_stopped_and_its_container_gone(make: Any) -> None:
    started = threading.Event()

    def runner(w: Wire) -> None:
        w.get("/v1/spec")
        started.set()
        w.get(wire.ALIVE_PATH)  # held until the broker closes

    async with make(runner) as h:
        ctx = await h.manager.start_background(task())
        assert await _wait(started)
        assert await h.manager.stop(ctx.task_id) == [ctx.task_id]
        result = await h.manager.wait_for(ctx.task_id, 10)
        assert result is not None and result.status is TaskStatus.STOPPED
        assert h.manager.background.take(None) == [result]  # reported to its parent once
        assert h.kinds(ctx.task_id) == ["task_started", "task_stopped"]


async def test_closing_after_a_stop_waits_until_every_end_is_recorded(make: Any) -> None:
    # Ctrl-C cancels the parent's Task calls; each one's end (container removed, status
    # recorded) runs on, shielded. The run closes its store right after `close`: every
    # task must be recorded stopped by then, never left `running`.
    started = threading.Semaphore(0)

    def runner(w: Wire) -> None:
        w.get("/v1/spec")
        started.release()
        w.get(wire.ALIVE_PATH)  # held until the broker closes

    async with make(runner) as h:
        calls = asyncio.gather(*(h.manager.run_task(task(f"t{i}")) for i in range(3)))
        for _ in range(3):
            assert await asyncio.to_thread(started.acquire, True, 10)
        removing = threading.Event()  # container removals wait until close has begun
        remove = h.backend.remove
        h.backend.remove = lambda cid: (removing.wait(10), remove(cid))[1]  # type: ignore[method-assign]
        calls.cancel()
        with pytest.raises(asyncio.CancelledError):
            await calls
        closing = asyncio.ensure_future(h.manager.close())
        await asyncio.sleep(0)  # one step: close has begun
        removing.set()
        await closing
        recorded = {t.task_id: t.status for t in h.store.list_tasks(RUN_ID)}
        assert sorted(recorded.values()) == ["stopped"] * 3, recorded
        assert sorted(c.status.value for c in h.manager.tasks.values()) == ["stopped"] * 3


async def test_a_task_whose_image_is_missing_is_recorded_failed_at_once(make: Any) -> None:
    # It fails before its sandbox exists: the caller hears why, and its end is
    # recorded then (before, it stayed `pending` in the store for good).
    def missing(agent: AgentDefinition) -> SandboxImage:
        raise ImageNotFoundError("the warden agent image is not built; run `warden images build`")

    async with make(lambda w: None, image_resolver=missing) as h:
        with contextlib.suppress(ImageNotFoundError):  # raised, or a failed result
            await h.manager.run_task(task())
        (ctx,) = h.manager.tasks.values()
        assert ctx.status is TaskStatus.FAILED
        (record,) = h.store.list_tasks(RUN_ID)
        assert record.status == "failed" and "not built" in (record.error or "")


async def test_what_the_disk_meter_missed_is_an_event_of_the_task(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def runner(w: Wire) -> None:
        w.get("/v1/spec")
        w.result("ok")

    async with make(runner) as h:
        plain_wait = h.backend.wait

        def gappy_wait(container_id: str, timeout_s: float | None) -> SandboxResult:
            result = plain_wait(container_id, timeout_s)
            return replace(result, meter_gap="while this sandbox ran, ...")

        monkeypatch.setattr(h.backend, "wait", gappy_wait)
        result = await h.manager.run_task(task())
        assert result.status is TaskStatus.COMPLETED
        assert h.kinds(result.task_id) == ["task_started", "disk_meter_gap", "task_completed"]
        (gap,) = [e for e in h.events if e.kind == "disk_meter_gap"]
        assert gap.data["message"] == "while this sandbox ran, ..."


async def test_the_guards_a_run_lacks_are_said_once_as_run_events(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runtime import manager as manager_module

    monkeypatch.setattr(manager_module, "weakened_guards", lambda disk: ["no pin", "no records"])

    def runner(w: Wire) -> None:
        w.get("/v1/spec")
        w.result("ok")

    async with make(runner) as h:
        for _ in range(2):
            assert (await h.manager.run_task(task())).status is TaskStatus.COMPLETED
        said = [(e.kind, e.task_id, e.data["message"]) for e in h.events if "guard" in e.kind]
        assert said == [
            ("sandbox_guard_weakened", None, "no pin"),
            ("sandbox_guard_weakened", None, "no records"),
        ]


async def test_prewarm_resolves_images_off_the_event_loop_and_a_missing_one_is_no_error(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Resolving an image is an engine call and hashes files: the loop must not wait
    # for it. An image that is missing only makes its tasks start cold (they say why).
    resolved_on: list[int] = []

    def missing(agent: AgentDefinition) -> SandboxImage:
        resolved_on.append(threading.get_ident())
        raise ImageNotFoundError("the warden bash image is not built for the current sources")

    def never_runs(w: Wire) -> None:
        raise AssertionError("no sandbox may start")

    async with make(
        never_runs,
        config=TaskManagerConfig(warm_pool_size=1),
        image_resolver=missing,
        warm_pool=True,
    ) as h:
        h.manager.prewarm("worker")
        for _ in range(1000):
            if "could not start a warm sandbox" in caplog.text:
                break
            await asyncio.sleep(0.01)
        assert "not built for the current sources" in caplog.text
        assert resolved_on and threading.get_ident() not in resolved_on
        assert h.backend.list({}) == []


async def test_events_are_recorded_in_the_order_they_happened(make: Any) -> None:
    def runner(w: Wire) -> None:
        for kind in ("tool_started", "tool_finished", "turn_finished"):
            w.post("/v1/events", {"kind": kind, "tool_name": "Bash", "tool_use_id": "tu"})
        w.result("ok")

    async with make(runner) as h:
        result = await h.manager.run_task(task())
        expected = [
            "task_started",
            "task_running",
            "task_running",
            "task_running",
            "task_completed",
        ]
        assert h.kinds(result.task_id) == expected
        running = [e.data["event"] for e in h.events if e.kind == "task_running"]
        assert running == ["tool_started", "tool_finished", "turn_finished"]
        stored = [r.kind for r in h.store.events(run_id=RUN_ID)]
        assert stored == expected
        lines = (h.manager.events.jsonl_path).read_text().splitlines()  # type: ignore[attr-defined]
        assert [json.loads(line)["kind"] for line in lines] == expected


async def test_the_parent_delegates_and_sees_only_the_final_answer(make: Any) -> None:
    def runner(w: Wire) -> None:
        spec = w.get("/v1/spec")
        w.post("/v1/events", {"kind": "log", "detail": "INTERMEDIATE chatter"})
        w.result(f"FINAL answer to {spec['prompt']}")

    parent_script = {
        "conversations": [
            {
                "name": "parent",
                "match": {},
                "turns": [
                    {
                        "content": [
                            {
                                "type": "tool_use",
                                "name": "Task",
                                "input": {
                                    "description": "d",
                                    "prompt": "sum it",
                                    "subagent_type": "worker",
                                },
                            }
                        ]
                    },
                    {"content": [{"type": "text", "text": "all done"}]},
                ],
            }
        ]
    }
    async with (
        ScriptedModelServer(Script.model_validate(parent_script)) as parent_server,
        make(runner) as h,
    ):
        sdk = anthropic.AsyncAnthropic(base_url=parent_server.base_url, api_key="k", max_retries=0)
        usages: list[Any] = []

        async def seen(request: Any, response: Any, started: float, ended: float) -> None:
            usages.append(response.usage)

        # A model whose shortest cacheable prefix (512 tokens) the parent's tools and
        # system prompt exceed.
        client = ObservedClient(sdk, [seen])
        parent = ParentAgent(client=client, model="claude-opus-5", manager=h.manager)
        outcome = await parent.run("the user's request")
        await sdk.close()
        assert outcome.text == "all done" and outcome.turns == 2
        # Prompt caching: the second turn reads everything the first one sent.
        first, second = usages
        assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 512
        prompt1 = first.input_tokens + first.cache_creation_input_tokens
        assert second.cache_read_input_tokens == prompt1
        assert [r.text for r in outcome.tasks] == ["FINAL answer to sum it"]
        tool_results = [
            block
            for message in parent.messages
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        assert [b["content"] for b in tool_results] == [
            "Task Succeeded. Result: FINAL answer to sum it"
        ]
        assert "INTERMEDIATE" not in json.dumps(parent.messages)


async def test_fork_mode_subagents_start_from_the_parents_cached_prefix(
    make: Any, tmp_path: Path
) -> None:
    """Fork mode: five subagents started in one parent turn with `fork: true` begin with
    the parent's own request, byte for byte (tools, system prompt, messages), so at
    least 80 % of their first request is read from the parent's prompt cache; each
    runs only its own tools and only its final answer comes back."""
    from sandbox_tools.runner import run

    calls = [
        {"description": f"part {i}", "prompt": f"do part {i}", "subagent_type": "worker"}
        for i in range(5)
    ]
    script = Script(
        conversations=[
            Conversation(
                name="fork",
                match=Match(last_message_contains="[Fork mode]"),
                # A fork's first request holds the parent's assistant message: turn 1.
                turns=[
                    Turn(content=[TextBlock(text="-")]),
                    Turn(content=[TextBlock(text="fork answer")]),
                ],
            ),
            Conversation(
                name="parent",
                match=Match(has_tool="TaskStop"),
                turns=[
                    Turn(
                        content=[
                            ToolUseBlock(name="Task", input={**c, "fork": True}) for c in calls
                        ]
                    ),
                    Turn(content=[TextBlock(text="all done")]),
                ],
            ),
        ]
    )
    workspace = tmp_path / "ws"

    def runner(w: Wire) -> None:
        run(w.socket_path, workspace)

    async with (
        ScriptedModelServer(script) as model_server,
        make(runner, model_server=model_server) as h,
    ):
        sdk = anthropic.AsyncAnthropic(base_url=model_server.base_url, api_key="k", max_retries=0)
        parent = ParentAgent(
            client=ObservedClient(sdk, []), model="claude-opus-5", manager=h.manager, fork=True
        )
        outcome = await parent.run("split the work in five")
        await sdk.close()
    assert outcome.text == "all done"
    assert [r.text for r in outcome.tasks] == ["fork answer"] * 5
    parent_first = next(r for r in model_server.requests if r.conversation == "parent")
    forks = [r for r in model_server.requests if r.conversation == "fork"]
    assert len(forks) == 5

    def plain(value: Any) -> Any:
        return json.loads(json.dumps(value).replace(', "cache_control": {"type": "ephemeral"}', ""))

    assert isinstance(parent_first.body, dict)
    for record in forks:
        body = record.body
        assert isinstance(body, dict) and isinstance(record.usage, dict)
        assert body["model"] == "claude-opus-5"
        assert plain(body["tools"]) == plain(parent_first.body["tools"])
        assert plain(body["system"]) == plain(parent_first.body["system"])
        assert plain(body["messages"][:1]) == plain(parent_first.body["messages"])
        assert "Tools you may run: Bash, Read." in json.dumps(body["messages"][-1])
        usage = record.usage
        prompt = sum(
            int(usage[k])
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )  # type: ignore[call-overload]
        assert int(usage["cache_read_input_tokens"]) / prompt >= 0.8  # type: ignore[call-overload]
    # Fork mode is off unless the run turns it on: the call is refused, saying so.
    closed = ParentAgent(client=ObservedClient(sdk, []), model="m", manager=h.manager)
    refusal = closed._fork_prefix(TaskInput(**calls[0], fork=True))
    assert isinstance(refusal, str) and "fork mode is off" in refusal


async def test_the_parent_keeps_its_conversation_inside_a_small_window(make: Any) -> None:
    """The parent loop, like the runner, never sends a request over its model's
    window: old Task results are cleared, then old turns summarised, and the run
    ends normally with no "prompt is too long"."""
    window, rounds = 9000, 25
    counter = iter(range(1, 1000))

    def runner(w: Wire) -> None:
        w.get("/v1/spec")
        w.result(f"RESULT {next(counter)}: " + "finding " * 400)

    call = {"description": "d", "prompt": "look again", "subagent_type": "worker"}
    script = Script(
        conversations=[
            Conversation(
                name="stop",
                match=Match(last_message_contains=f"RESULT {rounds}:"),
                turns=[Turn(content=[TextBlock(text="all done")])] * 200,
            ),
            Conversation(
                name="summary",
                match=Match(last_message_contains="outgrow the context window"),
                turns=[Turn(content=[TextBlock(text="Summary: many looks, all fine.")])] * 200,
            ),
            Conversation(
                name="parent",
                match=Match(has_tool="TaskStop"),
                turns=[Turn(content=[ToolUseBlock(name="Task", input=call)])] * 200,
            ),
        ]
    )
    config = TaskManagerConfig(warm_pool_size=0, context_windows={"claude-small": window})
    async with (
        ScriptedModelServer(script, context_windows={"claude-small": window}) as model_server,
        make(runner, model_server=model_server, config=config) as h,
    ):
        sdk = anthropic.AsyncAnthropic(base_url=model_server.base_url, api_key="k", max_retries=0)
        parent = ParentAgent(
            client=ObservedClient(sdk, []), model="claude-small", manager=h.manager
        )
        outcome = await parent.run("look " + "carefully " * 50)
        await sdk.close()
    assert outcome.text == "all done" and len(outcome.tasks) == rounds
    assert {r.status for r in model_server.requests} == {200}
    assert any(r.conversation == "summary" for r in model_server.requests)
    # Its own conversation keeps every result whole.
    assert json.dumps(parent.messages).count("finding " * 400) == rounds


async def _wait(flag: threading.Event, timeout_s: float = 10) -> bool:
    import asyncio

    return await asyncio.to_thread(flag.wait, timeout_s)


async def test_a_task_whose_image_cannot_be_resolved_fails_at_once_and_is_recorded_failed(
    make: Any,
) -> None:
    """Its end is recorded like any other: the parent, the store and the summary all say
    failed, with the reason, and the run's close does not wait for it."""

    def missing(agent: AgentDefinition) -> SandboxImage:
        raise ImageNotFoundError("the warden agent image is not built for the current sources")

    def never_runs(w: Wire) -> None:
        raise AssertionError("no sandbox may start")

    async with make(never_runs, image_resolver=missing) as h:
        result = await h.manager.run_task(task())
        assert result.status is TaskStatus.FAILED
        assert "not built for the current sources" in (result.error or "")
        assert result.render().startswith("Task failed. Error: ")
        row = h.store.get_task(result.task_id)
        assert row.status == "failed"
        loop = asyncio.get_running_loop()
        started = loop.time()
        await h.manager.close()
        assert loop.time() - started < 5  # its end was recorded: nothing to wait for
        assert h.store.get_task(result.task_id).status == "failed"
