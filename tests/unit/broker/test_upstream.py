"""The broker calls the model through the real anthropic SDK on the host, against
the scripted server: every field the sandbox sends arrives unchanged; 429 (after
its retry-after), 529 and 500 are retried by the SDK within a bounded time; 400
and spend limits are never retried; an unreachable endpoint is a clear failure;
the sandbox gets Anthropic-shaped error bodies with the upstream status, and the
host records each retry."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from orchestrator.broker import Broker, Budget, ForwardingPolicy, Upstream
from orchestrator.broker.upstream import forward_messages, model_client
from orchestrator.permissions import parse_rule
from orchestrator.runtime.model_errors import from_upstream
from orchestrator.scripted import (
    Conversation,
    Match,
    Script,
    ScriptedError,
    ScriptedModelServer,
    TextBlock,
    Turn,
)
from sandbox_tools import wire
from tests.unit.broker.test_server import RecordingHost, make_spec

KEY = "sk-host-only"


def _convo(name: str, **error: Any) -> Conversation:
    return Conversation(
        name=name,
        match=Match(prompt_contains=name),
        turns=[
            Turn(
                content=[TextBlock(text=f"{name} ok")],
                error=ScriptedError(**error) if error else None,
            )
        ],
    )


SCRIPT = Script(
    conversations=[
        _convo("plain"),
        _convo("unknown-field"),
        _convo("slow-down", status=429, retry_after_s=0.4, times=1),
        _convo("overloaded", status=529, times=2),
        _convo("always-failing", status=500, message="scripted internal error"),
        _convo("invalid", status=400, message="messages.0: scripted bad request"),
        _convo("spend", status=429, message="You have reached your spend limit for the month"),
        _convo("billing", status=402, message="Your credit balance is too low"),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCRIPT).in_thread() as running:
        yield running


def attempts(server: ScriptedModelServer, conversation: str) -> int:
    return sum(1 for r in server.requests if r.conversation == conversation)


def body_for(prompt: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "container-chosen",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": prompt}],
        **extra,
    }


class Sandbox:
    """What the runner does: raw Messages JSON over the broker's Unix socket."""

    def __init__(self, broker: Broker, host: RecordingHost, client: httpx2.AsyncClient) -> None:
        self.broker, self.host, self.client = broker, host, client

    async def ask(self, body: dict[str, Any], **headers: str) -> httpx2.Response:
        return await self.client.post("/v1/messages", json=body, headers=headers)


async def _sandbox(
    base_url: str, *, retries: int = 8, total_s: float = 30.0, rules: tuple[str, ...] = ()
) -> AsyncIterator[Sandbox]:
    upstream = Upstream(model_client(base_url, KEY, max_retries=retries, retry_total_s=total_s))
    host = RecordingHost()
    policy = ForwardingPolicy.from_rules(parse_rule(r, "allow", "test", "test") for r in rules)
    with tempfile.TemporaryDirectory(prefix="wu-") as d:
        broker = Broker(
            socket_dir=Path(d),
            spec=make_spec(max_turns=10, max_tokens=4000),
            upstream=upstream,
            host=host,
            budget=Budget(max_turns=10),
            forwarding=policy,
        )
        async with broker:
            client = httpx2.AsyncClient(
                transport=httpx2.AsyncHTTPTransport(uds=str(broker.socket_path)),
                base_url=wire.BROKER_BASE_URL,
                timeout=60,
            )
            yield Sandbox(broker, host, client)
            await client.aclose()
    await upstream.client.close()


@pytest.fixture
async def sandbox(server: ScriptedModelServer) -> AsyncIterator[Sandbox]:
    async for s in _sandbox(server.base_url, rules=("RequestField(metadata)",)):
        yield s


def retry_notices(host: RecordingHost) -> list[str]:
    return [message for kind, message in host.notices if kind == "model_retries"]


async def test_every_field_reaches_the_api_unchanged_with_the_host_key(
    server: ScriptedModelServer, sandbox: Sandbox
) -> None:
    fields: dict[str, Any] = {
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {
                "name": "Bash",
                "description": "run a command",
                "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u-42"},
        "stop_sequences": ["\n\nHuman:", "END"],
        "temperature": 0.25,
        "top_k": 5,
    }
    sent = body_for("plain", **fields)
    response = await sandbox.ask(sent, **{"anthropic-version": "2023-06-01"})
    assert response.status_code == 200
    answer = response.json()
    assert answer["type"] == "message" and answer["content"][0]["text"] == "plain ok"
    (received,) = [r for r in server.requests if r.conversation == "plain"]
    # Exactly what the sandbox sent, but for the model, which the host chooses.
    assert received.body == {**sent, "model": "host-chosen-model", "stream": True}
    assert received.stream  # streamed upstream; the sandbox got one message
    assert received.api_key_matched is not False and received.api_key_present
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert retry_notices(sandbox.host) == []


async def test_fields_the_sdk_does_not_know_pass_through_unchanged(
    server: ScriptedModelServer,
) -> None:
    """Below the forwarding policy (which refuses unknown fields), the SDK layer
    neither drops nor re-types anything: a future field arrives as it was sent."""
    upstream = Upstream(model_client(server.base_url, KEY))
    future = {"nested": [1, 2.5, {"a": None, "b": [True, "x"]}], "big": 2**60}
    body = {
        **body_for("unknown-field"),
        "future_feature": future,
        "cache_control": {"type": "ephemeral"},
    }
    answer = await forward_messages(upstream, body, ["future-beta-2027-01-01"], None)
    await upstream.client.close()
    assert answer.status == 200 and answer.retries == 0
    (received,) = [r for r in server.requests if r.conversation == "unknown-field"]
    assert received.body == {**body, "stream": True}
    assert received.headers["anthropic-beta"] == "future-beta-2027-01-01"


async def test_a_429_is_retried_after_its_retry_after_then_succeeds(
    server: ScriptedModelServer, sandbox: Sandbox
) -> None:
    started = time.monotonic()
    response = await sandbox.ask(body_for("slow-down"))
    assert response.status_code == 200 and response.json()["content"][0]["text"] == "slow-down ok"
    assert time.monotonic() - started >= 0.35  # the SDK waited the server's retry-after
    assert attempts(server, "slow-down") == 2
    (notice,) = retry_notices(sandbox.host)
    assert "retried 1 time(s) on the host" in notice and "#1 HTTP 429 rate_limit_error" in notice
    assert notice.endswith("it succeeded")
    assert sandbox.broker.model_failures.count == 0


async def test_529_overloaded_is_retried_until_it_succeeds(
    server: ScriptedModelServer, sandbox: Sandbox
) -> None:
    response = await sandbox.ask(body_for("overloaded"))
    assert response.status_code == 200
    assert attempts(server, "overloaded") == 3
    (notice,) = retry_notices(sandbox.host)
    assert "#1 HTTP 529 overloaded_error; #2 HTTP 529 overloaded_error" in notice


async def test_a_repeated_500_stops_when_the_retry_budget_is_spent(
    server: ScriptedModelServer,
) -> None:
    async for sandbox in _sandbox(server.base_url, retries=100, total_s=1.0):
        started = time.monotonic()
        response = await sandbox.ask(body_for("always-failing"))
        took = time.monotonic() - started
        assert response.status_code == 500
        assert response.json() == wire.error_body("api_error", "scripted internal error")
        assert response.headers["x-should-retry"] == "false"
        assert 1.0 <= took < 10
        made = attempts(server, "always-failing")
        assert 2 <= made < 10
        failures = sandbox.broker.model_failures
        assert failures.attempts == made and failures.status == 500
        line = from_upstream(failures)
        assert line is not None
        assert line.startswith("the model API answered HTTP 500 api_error: scripted internal error")
        assert f"after {made} attempts" in line and "the retry budget of 1 s is spent" in line
        (notice,) = retry_notices(sandbox.host)
        assert notice.endswith("failed with HTTP 500: the retry budget of 1 s is spent")


async def test_a_400_is_not_retried_and_reaches_the_sandbox_as_the_api_said_it(
    server: ScriptedModelServer, sandbox: Sandbox
) -> None:
    response = await sandbox.ask(body_for("invalid"))
    assert response.status_code == 400
    assert response.json() == wire.error_body(
        "invalid_request_error", "messages.0: scripted bad request"
    )
    assert attempts(server, "invalid") == 1 and retry_notices(sandbox.host) == []
    line = from_upstream(sandbox.broker.model_failures)
    assert line is not None and "(not retried)" in line


@pytest.mark.parametrize(("conversation", "status"), [("spend", 429), ("billing", 402)])
async def test_spend_limits_are_never_retried(
    server: ScriptedModelServer, sandbox: Sandbox, conversation: str, status: int
) -> None:
    response = await sandbox.ask(body_for(conversation))
    assert response.status_code == status
    assert response.json()["type"] == "error"
    assert attempts(server, conversation) == 1 and retry_notices(sandbox.host) == []
    line = from_upstream(sandbox.broker.model_failures)
    assert line is not None and "add credits or raise the limit" in line


@contextlib.contextmanager
def _refusing_url() -> Iterator[str]:
    """A loopback URL whose port is bound but never listened on: every connection is
    refused, and, held for the block, no other process can take the port and answer."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_a_refused_connection_is_retried_then_a_clear_502() -> None:
    with _refusing_url() as url:
        async for sandbox in _sandbox(url, retries=2):
            response = await sandbox.ask(body_for("anyone there"))
            assert response.status_code == 502
            error = response.json()["error"]
            assert error["type"] == "api_error"
            said = error["message"]
            assert said.startswith("the model endpoint did not answer: APIConnectionError")
            failures = sandbox.broker.model_failures
            assert failures.status is None and failures.attempts == 3
            line = from_upstream(failures)
            assert line is not None and line.startswith("the model endpoint did not answer (")
            assert "after 3 attempt(s)" in line and "ANTHROPIC_BASE_URL" in line
            (notice,) = retry_notices(sandbox.host)
            assert "#1 no answer (APIConnectionError" in notice


async def test_refused_connections_stop_at_the_retry_budget_too() -> None:
    with _refusing_url() as url:
        async for sandbox in _sandbox(url, retries=100, total_s=0.5):
            started = time.monotonic()
            response = await sandbox.ask(body_for("anyone there"))
            assert time.monotonic() - started < 10
            assert response.status_code == 502
            assert "the retry budget of 0.5 s is spent" in response.json()["error"]["message"]
            assert 2 <= sandbox.broker.model_failures.attempts < 100
