"""The in-container agent loop, end to end on the host: the stdlib runner talks
HTTP over a Unix socket to a small scripted fake broker (which checks every
document with the host's pydantic wire models). Locks in: a fresh
conversation from the spec, permission before every tool (allow runs it,
deny tells the model and does not), updated input, max_turns, a refused model
call ending in a failed result with the broker's message, a transcript
checkpoint after every turn, events, nested Task delegation, the final text,
and the exit codes of `python -m sandbox_tools`."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from orchestrator.broker import wire_models
from sandbox_tools import wire
from sandbox_tools.runner import EXIT_BROKER, EXIT_OK, run
from tests.conftest import REPO_ROOT

Policy = Callable[[wire_models.PermissionRequest], wire_models.PermissionResponse]


def uncached(value: Any) -> Any:
    """`value` without `cache_control` anywhere: what the model sees."""
    if isinstance(value, dict):
        return {k: uncached(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [uncached(v) for v in value]
    return value


Handler = Callable[[web.Request], Awaitable[web.Response]]


def allow_all(_: wire_models.PermissionRequest) -> wire_models.PermissionResponse:
    return wire_models.PermissionResponse(behavior="allow")


def text_turn(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def tool_turn(
    name: str, tool_input: dict[str, Any], tid: str = "toolu_1", say: str = ""
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    content.append({"type": "tool_use", "id": tid, "name": name, "input": tool_input})
    return {"content": content, "stop_reason": "tool_use"}


def refusal(status: int, message: str) -> dict[str, Any]:
    return {"refuse": (status, message)}


@dataclass
class FakeBroker:
    """Serves the broker endpoints from a script and records every request."""

    spec: wire_models.TaskSpec
    turns: list[dict[str, Any]]
    policy: Policy = allow_all
    delegate_answer: wire_models.DelegateResponse = field(
        default_factory=lambda: wire_models.DelegateResponse(text="sub result")
    )
    model_requests: list[dict[str, Any]] = field(default_factory=list)
    permissions: list[wire_models.PermissionRequest] = field(default_factory=list)
    events: list[wire_models.EventRequest] = field(default_factory=list)
    event_posts: int = 0
    arrivals: list[str] = field(default_factory=list)
    """Paths of the POSTs, in the order they arrived."""
    transcripts: list[wire_models.TranscriptCheckpoint] = field(default_factory=list)
    delegations: list[wire_models.DelegateRequest] = field(default_factory=list)
    results: list[wire_models.ResultRequest] = field(default_factory=list)
    overrides: dict[str, Handler] = field(default_factory=dict)
    """Replacement handlers by path."""

    def app(self) -> web.Application:
        routes: dict[str, Handler] = {
            "/v1/messages": self._messages,
            "/v1/permission": self._permission,
            "/v1/events": self._events,
            "/v1/transcript": self._record(wire_models.TranscriptCheckpoint, self.transcripts),
            "/v1/result": self._record(wire_models.ResultRequest, self.results),
            "/v1/task": self._task,
        }
        routes.update(self.overrides)

        @web.middleware
        async def note(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method == "POST":
                self.arrivals.append(request.path)
            return await handler(request)

        app = web.Application(middlewares=[note])
        app.router.add_get("/v1/spec", self._spec)
        for path, handler in routes.items():
            app.router.add_post(path, handler)
        return app

    async def _spec(self, _: web.Request) -> web.Response:
        return web.json_response(self.spec.model_dump())

    async def _messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.model_requests.append(body)
        turn = self.turns[len(self.model_requests) - 1]
        if "refuse" in turn:
            status, message = turn["refuse"]
            return web.json_response(
                wire.error_body("invalid_request_error", message), status=status
            )
        return web.json_response(
            {
                "id": f"msg_{len(self.model_requests)}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": turn["content"],
                "stop_reason": turn["stop_reason"],
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        )

    async def _permission(self, request: web.Request) -> web.Response:
        req = wire_models.PermissionRequest.model_validate(await request.json())
        self.events.extend(req.events)  # progress that rode along, recorded first
        self.permissions.append(req)
        return web.json_response(self.policy(req).model_dump())

    async def _task(self, request: web.Request) -> web.Response:
        self.delegations.append(wire_models.DelegateRequest.model_validate(await request.json()))
        return web.json_response(self.delegate_answer.model_dump())

    async def _events(self, request: web.Request) -> web.Response:
        batch = wire_models.EventBatch.model_validate(await request.json())
        self.events.extend(batch.events)
        self.event_posts += 1
        return web.json_response(wire_models.Ack().model_dump())

    def _record(self, model: type[Any], into: list[Any]) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            into.append(model.model_validate(await request.json()))
            return web.json_response(wire_models.Ack().model_dump())

        return handler

    def tool_results(self, request_index: int) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message of one model request."""
        last = self.model_requests[request_index]["messages"][-1]
        assert last["role"] == "user"
        return [uncached(b) for b in last["content"] if b["type"] == "tool_result"]


@pytest.fixture
async def socket_dir() -> AsyncIterator[Path]:
    # A short path: Unix socket paths are limited to ~107 bytes.
    d = Path(tempfile.mkdtemp(prefix="wsb-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_spec(**overrides: Any) -> wire_models.TaskSpec:
    base: dict[str, Any] = {
        "task_id": "sa_test",
        "trace_id": "tr_test",
        "agent_type": "general-purpose",
        "model": "claude-test",
        "system_prompt": "You are a careful subagent.",
        "prompt": "Do the thing.",
        "tools": ["Bash", "Read", "Write", "Edit", "Glob", "Grep"],
        "max_turns": 10,
    }
    base.update(overrides)
    return wire_models.TaskSpec.model_validate(base)


async def serve_and_run(
    broker: FakeBroker, socket_dir: Path, workspace: Path, keepalive_s: float = 75.0
) -> int:
    runner = web.AppRunner(broker.app(), keepalive_timeout=keepalive_s)
    await runner.setup()
    sock = str(socket_dir / "broker.sock")
    await web.UnixSite(runner, sock).start()
    try:
        return await asyncio.to_thread(run, sock, workspace)
    finally:
        await runner.cleanup()


async def test_fresh_conversation_allowed_tool_runs_and_final_text_is_posted(
    socket_dir: Path, tmp_path: Path
) -> None:
    broker = FakeBroker(
        make_spec(),
        [
            tool_turn("Bash", {"command": "echo hello > out.txt && echo wrote it"}, say="On it. "),
            text_turn("All done: "),
        ],
    )
    broker.turns[1]["content"].append({"type": "text", "text": "out.txt written."})
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK

    first = broker.model_requests[0]
    cached = {"type": "ephemeral"}
    assert first["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Do the thing.", "cache_control": cached}],
        }
    ]
    assert first["system"] == [
        {"type": "text", "text": "You are a careful subagent.", "cache_control": cached}
    ]
    assert first["tools"][-1]["cache_control"] == cached
    assert first["model"] == "claude-test"
    assert "output_config" not in first  # no effort: the API's default
    assert [t["name"] for t in first["tools"]] == ["Bash", "Read", "Write", "Edit", "Glob", "Grep"]

    assert (tmp_path / "out.txt").read_text() == "hello\n"
    [result] = broker.tool_results(1)
    assert result["tool_use_id"] == "toolu_1"
    assert not result["is_error"]
    assert "wrote it" in result["content"]
    assert "[exit code 0]" in result["content"]

    assert broker.results == [
        wire_models.ResultRequest(status="completed", text="All done: out.txt written.")
    ]
    kinds = [(e.kind, e.tool_name) for e in broker.events]
    assert kinds == [
        ("tool_started", "Bash"),
        ("tool_finished", "Bash"),
        ("turn_finished", None),
        ("turn_finished", None),
    ]
    assert "echo hello > out.txt" in broker.events[0].detail
    assert broker.events[1].detail == "exit code 0"


async def test_transcript_is_checkpointed_after_every_turn(
    socket_dir: Path, tmp_path: Path
) -> None:
    broker = FakeBroker(
        make_spec(),
        [
            tool_turn("Write", {"file_path": "a.txt", "content": "A"}, "t1"),
            tool_turn("Read", {"file_path": "a.txt"}, "t2"),
            text_turn("done"),
        ],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert [c.turn for c in broker.transcripts] == [1, 2, 3]
    # each checkpoint holds the whole conversation so far, tool results included
    assert [len(c.messages) for c in broker.transcripts] == [3, 5, 6]
    assert broker.transcripts[-1].messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "done"}],
    }
    assert broker.transcripts[1].messages[-1]["content"][0]["content"].endswith("A")


async def test_each_turn_resends_the_previous_request_byte_for_byte_with_breakpoints(
    socket_dir: Path, tmp_path: Path
) -> None:
    """Prompt caching: every request starts with exactly the blocks the previous one sent
    (same JSON once `cache_control` is set aside), carries at most four breakpoints (tools,
    system, the previous request's last block, the newest block), and the conversation
    the model sees is the checkpointed transcript, unchanged by caching."""
    import json

    broker = FakeBroker(
        make_spec(),
        [
            tool_turn("Write", {"file_path": "a.txt", "content": "A"}, "t1"),
            tool_turn("Read", {"file_path": "a.txt"}, "t2"),
            tool_turn("Read", {"file_path": "a.txt"}, "t3"),
            text_turn("done"),
        ],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK

    def blocks(request: dict[str, Any]) -> list[str]:
        out = [json.dumps(uncached(t)) for t in request["tools"]]
        out += [json.dumps(uncached(b)) for b in request["system"]]
        for message in request["messages"]:
            out += [message["role"]] + [json.dumps(uncached(b)) for b in message["content"]]
        return out

    requests = broker.model_requests
    for before, after in itertools.pairwise(requests):
        assert blocks(after)[: len(blocks(before))] == blocks(before)
    for request in requests:
        marks = json.dumps(request).count('"cache_control"')
        assert 3 <= marks <= 4
        assert request["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # The last request's conversation is the transcript minus the final answer.
    sent = [
        {"role": m["role"], "content": uncached(m["content"])} for m in requests[-1]["messages"]
    ]
    final = broker.transcripts[-1].messages[:-1]
    assert sent[1:] == final[1:]
    assert sent[0]["content"] == [{"type": "text", "text": final[0]["content"]}]


async def test_denied_tool_is_not_run_and_the_model_is_told_why(
    socket_dir: Path, tmp_path: Path
) -> None:
    def deny_writes(req: wire_models.PermissionRequest) -> wire_models.PermissionResponse:
        if req.tool_name == "Write":
            return wire_models.PermissionResponse(
                behavior="deny", reason="Writes are not allowed here"
            )
        return wire_models.PermissionResponse(behavior="allow")

    broker = FakeBroker(
        make_spec(),
        [tool_turn("Write", {"file_path": "x.txt", "content": "no"}), text_turn("ok")],
        policy=deny_writes,
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert not (tmp_path / "x.txt").exists()
    assert broker.permissions[0].tool_name == "Write"
    assert broker.permissions[0].tool_input == {"file_path": "x.txt", "content": "no"}
    [result] = broker.tool_results(1)
    assert result["is_error"]
    assert "denied" in result["content"] and "by policy" in result["content"]
    assert "Writes are not allowed here" in result["content"]
    assert not [e for e in broker.events if e.kind == "tool_started"]


async def test_updated_input_from_the_host_replaces_the_models_input(
    socket_dir: Path, tmp_path: Path
) -> None:
    def rewrite(req: wire_models.PermissionRequest) -> wire_models.PermissionResponse:
        return wire_models.PermissionResponse(
            behavior="allow", updated_input={"command": "echo rewritten"}
        )

    broker = FakeBroker(
        make_spec(), [tool_turn("Bash", {"command": "echo original"}), text_turn("ok")], rewrite
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    [result] = broker.tool_results(1)
    assert "rewritten" in result["content"] and "original" not in result["content"]


async def test_tool_not_in_spec_is_refused_without_asking(socket_dir: Path, tmp_path: Path) -> None:
    broker = FakeBroker(
        make_spec(tools=["Read"]),
        [tool_turn("Bash", {"command": "touch pwned"}), text_turn("ok")],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert [t["name"] for t in broker.model_requests[0]["tools"]] == ["Read"]
    assert not broker.permissions
    assert not (tmp_path / "pwned").exists()
    [result] = broker.tool_results(1)
    assert result["is_error"] and "not available" in result["content"]


async def test_tool_failure_becomes_an_error_result_and_the_loop_goes_on(
    socket_dir: Path, tmp_path: Path
) -> None:
    broker = FakeBroker(
        make_spec(),
        [
            tool_turn("Read", {"file_path": "/etc/passwd"}, "t1"),
            tool_turn("Edit", {"file_path": "missing.txt", "old_string": "a"}, "t2"),
            text_turn("gave up"),
        ],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    [outside] = broker.tool_results(1)
    assert outside["is_error"] and "outside the workspace" in outside["content"]
    [invalid] = broker.tool_results(2)
    assert invalid["is_error"] and "new_string" in invalid["content"]
    assert broker.results[0].status == "completed"


async def test_a_tool_input_that_is_not_an_object_is_answered_with_an_error(
    socket_dir: Path, tmp_path: Path
) -> None:
    broker = FakeBroker(
        make_spec(),
        [tool_turn("Bash", "touch pwned", "t1"), text_turn("retried")],  # type: ignore[arg-type]
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert not broker.permissions and not (tmp_path / "pwned").exists()
    [result] = broker.tool_results(1)
    assert result["is_error"] and "was not a JSON object" in result["content"]
    echoed = broker.model_requests[1]["messages"][1]["content"]
    assert [b["input"] for b in echoed if b["type"] == "tool_use"] == [{}]  # the API's shape
    assert broker.results[0].status == "completed"


async def test_max_turns_is_respected(socket_dir: Path, tmp_path: Path) -> None:
    broker = FakeBroker(
        make_spec(max_turns=2),
        [tool_turn("Bash", {"command": f"echo {i}"}, f"t{i}", say=f"step {i}") for i in range(5)],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert len(broker.model_requests) == 2
    [result] = broker.results
    assert result.status == "failed"
    assert result.error is not None and "max_turns" in result.error
    assert result.text == "step 1"
    assert [c.turn for c in broker.transcripts] == [1, 2]


async def test_refused_model_call_ends_in_a_failed_result_with_the_brokers_message(
    socket_dir: Path, tmp_path: Path
) -> None:
    broker = FakeBroker(
        make_spec(),
        [
            tool_turn("Bash", {"command": "true"}, say="working"),
            refusal(403, "token budget of 1000 tokens is exhausted"),
        ],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert len(broker.model_requests) == 2  # a 403 is not retried
    [result] = broker.results
    assert result.status == "failed"
    assert result.error is not None
    assert "token budget of 1000 tokens is exhausted" in result.error
    assert "403" in result.error
    assert result.text == "working"
    # checkpointed after turn 1, and again before giving up
    assert [c.turn for c in broker.transcripts] == [1, 1]


async def test_task_tool_is_delegated_to_the_host(socket_dir: Path, tmp_path: Path) -> None:
    task_input = {
        "description": "count files",
        "prompt": "Count the files",
        "subagent_type": "bash",
        "max_turns": 3,
    }
    broker = FakeBroker(
        make_spec(tools=["Read", "Task"]),
        [tool_turn("Task", task_input), text_turn("the child said: sub result")],
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    task_schema = next(t for t in broker.model_requests[0]["tools"] if t["name"] == "Task")
    assert task_schema["input_schema"]["required"] == ["description", "prompt"]  # as Claude Code
    [delegation] = broker.delegations
    assert delegation.tool_use_id == "toolu_1"
    assert delegation.input == task_input
    [result] = broker.tool_results(1)
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "sub result",
        "is_error": False,
    }


async def test_missing_broker_socket_exits_non_zero_with_a_message(
    socket_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await asyncio.to_thread(run, str(socket_dir / "nobody.sock"), tmp_path)
    assert code == EXIT_BROKER
    err = capsys.readouterr().err
    assert "nobody.sock does not exist" in err and "mounted" in err


async def test_silent_broker_socket_exits_non_zero_with_a_message(
    socket_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = socket_dir / "dead.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(dead))
    listener.close()  # the file stays, nobody listens: connect() is refused
    code = await asyncio.to_thread(run, str(dead), tmp_path)
    assert code == EXIT_BROKER
    err = capsys.readouterr().err
    assert "cannot reach the broker" in err and "dead.sock" in err


async def test_python_dash_m_entry_point(socket_dir: Path, tmp_path: Path) -> None:
    broker = FakeBroker(make_spec(), [text_turn("hi from a subprocess")])
    runner = web.AppRunner(broker.app())
    await runner.setup()
    sock = str(socket_dir / "broker.sock")
    await web.UnixSite(runner, sock).start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sandbox_tools",
            "--socket",
            sock,
            "--workspace",
            str(tmp_path),
            cwd=REPO_ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await runner.cleanup()
    assert proc.returncode == 0, err.decode()
    assert broker.results == [
        wire_models.ResultRequest(status="completed", text="hi from a subprocess")
    ]


async def test_permission_may_wait_longer_than_any_quick_timeout(
    socket_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_tools import broker as broker_module

    monkeypatch.setattr(broker_module, "BROKER_REQUEST_TIMEOUT_S", 0.3)
    fake = FakeBroker(
        make_spec(), [tool_turn("Bash", {"command": "echo approved"}), text_turn("ok")]
    )
    slow_human = fake._permission

    async def after_a_while(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)  # a human takes their time
        return await slow_human(request)

    fake.overrides["/v1/permission"] = after_a_while
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    assert "approved" in fake.tool_results(1)[0]["content"]


async def test_refused_checkpoints_and_events_do_not_stop_the_loop(
    socket_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeBroker(make_spec(), [tool_turn("Bash", {"command": "true"}), text_turn("fine")])

    async def too_large(_: web.Request) -> web.Response:
        return web.json_response(wire.error_body("request_too_large", "body too big"), status=413)

    fake.overrides.update({"/v1/transcript": too_large, "/v1/events": too_large})
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    assert fake.results == [wire_models.ResultRequest(status="completed", text="fine")]
    assert "transcript checkpoint after turn 1 was refused" in caplog.text
    assert "body too big" in caplog.text


async def test_a_runner_bug_posts_a_failed_result_and_exits_1(
    socket_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_tools import runner as runner_module

    def broken(self: object) -> wire_models.ResultRequest:
        raise KeyError("oops")

    monkeypatch.setattr(runner_module.AgentLoop, "run", broken)
    fake = FakeBroker(make_spec(), [])
    assert await serve_and_run(fake, socket_dir, tmp_path) == runner_module.EXIT_BUG
    [result] = fake.results
    assert result.status == "failed"
    assert result.error is not None and "the runner crashed: KeyError" in result.error


async def test_a_model_call_that_times_out_ends_in_a_failed_result(
    socket_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_tools import broker as broker_module

    monkeypatch.setattr(broker_module, "MODEL_CALL_TIMEOUT_S", 0.3)
    fake = FakeBroker(make_spec(model_max_retries=0), [text_turn("too late")])

    async def stuck(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({})

    fake.overrides["/v1/messages"] = stuck
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    [result] = fake.results
    assert result.status == "failed"
    assert result.error is not None and "did not answer within" in result.error


async def test_events_and_checkpoints_arrive_in_order_and_before_the_result(
    socket_dir: Path, tmp_path: Path
) -> None:
    fake = FakeBroker(
        make_spec(),
        [
            tool_turn("Bash", {"command": "true"}, "t1"),
            tool_turn("Read", {"file_path": "nope.txt"}, "t2"),
            text_turn("done"),
        ],
    )
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    kinds = [(e.kind, e.tool_use_id) for e in fake.events]
    assert kinds == [
        ("tool_started", "t1"),
        ("tool_finished", "t1"),
        ("turn_finished", None),
        ("tool_started", "t2"),
        ("tool_finished", "t2"),
        ("turn_finished", None),
        ("turn_finished", None),
    ]
    assert fake.events[4].is_error
    # Everything queued in the background was delivered before the result.
    assert fake.arrivals[-1] == "/v1/result"
    assert [c.turn for c in fake.transcripts] == [1, 2, 3]
    # Progress rides in batches: fewer posts than events.
    assert fake.event_posts <= len(fake.events)


async def test_a_calls_progress_rides_on_the_next_permission_request(
    socket_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two calls in one turn: the first call's start and end go with the second
    # call's permission request, not as a request of their own; the last call's go
    # before the turn's checkpoint. (A hold no test outlives: a loaded machine
    # cannot make the hold run out between the calls.)
    from sandbox_tools import runner as runner_module

    monkeypatch.setattr(runner_module, "PROGRESS_HOLD_S", 600.0)
    fake = FakeBroker(
        make_spec(),
        [
            {
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "true"}},
                    {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "true"}},
                ],
                "stop_reason": "tool_use",
            },
            text_turn("done"),
        ],
    )
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    assert len(fake.permissions) == 2 and fake.permissions[0].events == []
    carried = [(e.kind, e.tool_use_id) for e in fake.permissions[1].events]
    assert carried == [("tool_started", "t1"), ("tool_finished", "t1")]
    kinds = [(e.kind, e.tool_use_id) for e in fake.events]
    assert kinds[:4] == [
        ("tool_started", "t1"),
        ("tool_finished", "t1"),
        ("tool_started", "t2"),
        ("tool_finished", "t2"),
    ]
    assert fake.arrivals.index("/v1/events") < fake.arrivals.index("/v1/transcript")


async def test_a_bug_still_flushes_queued_events_before_the_failed_result(
    socket_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_tools import runner as runner_module

    original = runner_module.AgentLoop.call_tool

    def then_crash(self: Any, block: dict[str, Any]) -> dict[str, Any]:
        original(self, block)
        raise RuntimeError("boom after the tool ran")

    monkeypatch.setattr(runner_module.AgentLoop, "call_tool", then_crash)
    fake = FakeBroker(make_spec(), [tool_turn("Bash", {"command": "true"}, "t1")])
    assert await serve_and_run(fake, socket_dir, tmp_path) == runner_module.EXIT_BUG
    assert [e.kind for e in fake.events] == ["tool_started", "tool_finished"]
    assert fake.arrivals[-1] == "/v1/result"
    [result] = fake.results
    assert result.error is not None and "boom after the tool ran" in result.error


async def test_a_kept_connection_the_broker_closed_is_replaced(
    socket_dir: Path, tmp_path: Path
) -> None:
    # The broker drops idle connections after 50 ms; the tool takes longer, so the
    # next request finds its kept connection closed and must go out on a new one.
    fake = FakeBroker(
        make_spec(),
        [
            tool_turn("Bash", {"command": "sleep 0.3; echo slept"}, "t1"),
            tool_turn("Bash", {"command": "sleep 0.3; echo again"}, "t2"),
            text_turn("rested"),
        ],
    )
    assert await serve_and_run(fake, socket_dir, tmp_path, keepalive_s=0.05) == EXIT_OK
    assert len(fake.model_requests) == 3 and len(fake.permissions) == 2
    assert "slept" in fake.tool_results(1)[0]["content"]
    assert fake.results == [wire_models.ResultRequest(status="completed", text="rested")]


async def test_an_anthropic_error_body_ends_the_task_once_without_retrying(
    socket_dir: Path, tmp_path: Path
) -> None:
    fake = FakeBroker(make_spec(), [refusal(529, "Overloaded")])
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    assert len(fake.model_requests) == 1  # the host's SDK retried already; the runner does not
    [result] = fake.results
    assert result.status == "failed"
    assert result.error == "the model call was refused: Overloaded (HTTP 529)"


async def test_a_broker_that_vanishes_mid_call_ends_the_runner_with_exit_2(
    socket_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeBroker(make_spec(), [])

    async def hang_up(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    fake.overrides["/v1/messages"] = hang_up
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_BROKER
    assert "cannot reach the broker" in capsys.readouterr().err
    assert not fake.results


async def test_a_file_name_that_is_not_utf8_does_not_break_the_conversation(
    socket_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / os.fsdecode(b"bad-\xff-name.txt")).write_text("x")
    fake = FakeBroker(make_spec(), [tool_turn("Glob", {"pattern": "*.txt"}), text_turn("listed")])
    assert await serve_and_run(fake, socket_dir, tmp_path) == EXIT_OK
    [listing] = fake.tool_results(1)
    assert "bad-?-name.txt" in listing["content"]
    assert fake.results == [wire_models.ResultRequest(status="completed", text="listed")]


async def test_the_agents_effort_goes_into_every_model_call(
    socket_dir: Path, tmp_path: Path
) -> None:
    """`effort` in the spec is sent as Claude Code sends it: `output_config.effort`."""
    broker = FakeBroker(
        make_spec(effort="low"), [tool_turn("Read", {"file_path": "x"}), text_turn("ok")]
    )
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    assert [r["output_config"] for r in broker.model_requests] == [{"effort": "low"}] * 2


async def test_a_skill_loads_as_in_claude_code(socket_dir: Path, tmp_path: Path) -> None:
    """`Skill` answers `Launching skill: NAME` and puts the skill's directory and text
    (`$ARGUMENTS` filled) after the tool results; an unknown name is an error; without
    skills in the spec the tool is not offered."""
    skill = {"name": "greet", "description": "Greets", "directory": "/workspace/.claude/skills/greet",
             "text": "Say hi to $ARGUMENTS."}  # fmt: skip
    hidden = {"name": "hidden", "directory": "/workspace/.claude/skills/hidden", "text": "HIDDEN",
              "invocable": False}  # fmt: skip
    broker = FakeBroker(
        make_spec(tools=["Read", "Skill"], skills=[skill, hidden]),
        [tool_turn("Skill", {"skill": "greet", "args": "Ann"}, "s1"),
         tool_turn("Skill", {"skill": "nosuch"}, "s2"),
         tool_turn("Skill", {"skill": "hidden"}, "s3"), text_turn("ok")],
    )  # fmt: skip
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    first = broker.model_requests[0]
    assert [t["name"] for t in first["tools"]] == ["Read", "Skill"]
    loaded = broker.model_requests[1]["messages"][-1]["content"]
    assert loaded[0]["content"] == "Launching skill: greet" and not loaded[0]["is_error"]
    assert loaded[1]["text"] == (
        "Base directory for this skill: /workspace/.claude/skills/greet\n\nSay hi to Ann.\n"
    )
    unknown = broker.model_requests[2]["messages"][-1]["content"]
    assert unknown[0]["is_error"] and "Unknown skill: nosuch" in unknown[0]["content"]
    refused = broker.model_requests[3]["messages"][-1]["content"]
    assert refused[0]["is_error"] and refused[0]["content"] == (  # Claude Code's words
        "<tool_use_error>Skill hidden cannot be used with Skill tool due to "
        "disable-model-invocation</tool_use_error>"
    )
    assert len(refused) == 1  # nothing of its text follows

    bare = FakeBroker(make_spec(tools=["Read", "Skill"]), [text_turn("ok")])
    assert await serve_and_run(bare, socket_dir, tmp_path) == EXIT_OK
    assert [t["name"] for t in bare.model_requests[0]["tools"]] == ["Read"]
