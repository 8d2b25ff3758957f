"""The broker enforces the subagent's budgets on the host, adds the API key only
upstream, and answers hostile or malformed requests with a 4xx without
disturbing the host."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from orchestrator.broker import Broker, Budget, Upstream
from sandbox_tools import wire

REAL_KEY = "sk-real-key-never-in-a-container"


class RecordingHost:
    def __init__(self) -> None:
        self.permissions: list[wire.PermissionRequest] = []
        self.events: list[wire.EventRequest] = []
        self.transcripts: list[tuple[int, list[dict[str, Any]]]] = []
        self.results: list[wire.ResultRequest] = []
        self.rejected: list[tuple[str, int, str]] = []

    async def decide_permission(self, request: wire.PermissionRequest) -> wire.PermissionResponse:
        self.permissions.append(request)
        return wire.PermissionResponse(behavior="allow")

    async def delegate(self, request: wire.DelegateRequest) -> wire.DelegateResponse:
        return wire.DelegateResponse(text="child done")

    async def on_event(self, event: wire.EventRequest) -> None:
        self.events.append(event)

    async def on_transcript(self, messages: list[dict[str, Any]], turn: int) -> None:
        self.transcripts.append((turn, messages))

    async def on_result(self, result: wire.ResultRequest) -> None:
        self.results.append(result)

    async def on_rejected(self, endpoint: str, status: int, reason: str) -> None:
        self.rejected.append((endpoint, status, reason))


class FakeModel:
    """Upstream stand-in: records what reached it and answers like the API."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return httpx2.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "text", "text": "hello"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        )


def make_spec(**overrides: Any) -> wire.TaskSpec:
    values: dict[str, Any] = dict(
        task_id="sa_test",
        trace_id="t1",
        agent_type="general-purpose",
        model="host-chosen-model",
        system_prompt="sys",
        prompt="do it",
        tools=["Bash", "Read"],
        max_turns=2,
        max_tokens=1000,
    )
    values.update(overrides)
    return wire.TaskSpec(**values)


@pytest.fixture
def socket_dir() -> Any:
    # Unix socket paths must be short: pytest's tmp_path can be too long.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="wb-") as d:
        yield Path(d)


@pytest.fixture
async def broker_env(
    socket_dir: Path,
) -> AsyncIterator[tuple[Broker, RecordingHost, FakeModel, httpx2.AsyncClient]]:
    model = FakeModel()
    upstream_client = httpx2.AsyncClient(transport=httpx2.MockTransport(model.handler))
    host = RecordingHost()
    broker = Broker(
        socket_dir=socket_dir,
        spec=make_spec(),
        upstream=Upstream(base_url="http://model.test", api_key=REAL_KEY, client=upstream_client),
        host=host,
        budget=Budget(max_turns=2, max_total_tokens=1000),
    )
    async with broker:
        client = httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=str(broker.socket_path)),
            base_url=wire.BROKER_BASE_URL,
        )
        yield broker, host, model, client
        await client.aclose()
    await upstream_client.aclose()


def messages_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "container-chosen",
        "max_tokens": 10**9,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


async def test_spec_is_served(broker_env: Any) -> None:
    _, _, _, client = broker_env
    response = await client.get("/v1/spec")
    assert response.status_code == 200
    assert wire.TaskSpec.model_validate(response.json()) == make_spec()


async def test_model_call_gets_the_real_key_only_upstream_and_host_model(broker_env: Any) -> None:
    _, host, model, client = broker_env
    response = await client.post(
        "/v1/messages",
        json=messages_body(),
        headers={"x-api-key": "container-key", "authorization": "Bearer x"},
    )
    assert response.status_code == 200
    sent = model.requests[0]
    assert sent.headers["x-api-key"] == REAL_KEY
    assert "authorization" not in sent.headers
    body = json.loads(sent.content)
    assert body["model"] == "host-chosen-model"
    assert body["max_tokens"] == 1000
    # The broker checkpoints what the model saw plus its answer.
    turn, messages = host.transcripts[-1]
    assert turn == 1 and messages[-1]["role"] == "assistant"


async def test_max_turns_is_enforced_by_the_broker(broker_env: Any) -> None:
    _broker, host, model, client = broker_env
    for _ in range(2):
        assert (await client.post("/v1/messages", json=messages_body())).status_code == 200
    refused = await client.post("/v1/messages", json=messages_body())
    assert refused.status_code == 403
    assert "max_turns (2) reached" in refused.json()["error"]["message"]
    assert len(model.requests) == 2
    assert host.rejected and host.rejected[-1][0] == "/v1/messages"


async def test_token_budget_is_enforced(socket_dir: Path) -> None:
    model = FakeModel()
    upstream_client = httpx2.AsyncClient(transport=httpx2.MockTransport(model.handler))
    broker = Broker(
        socket_dir=socket_dir,
        spec=make_spec(max_turns=10),
        upstream=Upstream(base_url="http://model.test", api_key=None, client=upstream_client),
        host=RecordingHost(),
        budget=Budget(max_turns=10, max_total_tokens=15),
    )
    async with broker:
        client = httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=str(broker.socket_path)),
            base_url=wire.BROKER_BASE_URL,
        )
        assert (await client.post("/v1/messages", json=messages_body())).status_code == 200
        refused = await client.post("/v1/messages", json=messages_body())
        assert refused.status_code == 403
        assert "token budget" in refused.json()["error"]["message"]
        await client.aclose()
    await upstream_client.aclose()


@pytest.mark.parametrize(
    ("path", "payload", "status"),
    [
        ("/v1/messages", b"not json{", 400),
        ("/v1/messages", b'{"messages": "not a list"}', 400),
        ("/v1/messages", json.dumps(messages_body(stream=True)).encode(), 400),
        ("/v1/permission", b'{"tool_name": "Bash"}', 400),
        (
            "/v1/permission",
            b'{"tool_use_id": "1", "tool_name": "Bash", "tool_input": {}, "extra": 1}',
            400,
        ),
        ("/v1/events", b'{"kind": "nonsense"}', 400),
        ("/v1/events", json.dumps({"kind": "log", "detail": "x" * 10_000}).encode(), 400),
        ("/v1/transcript", b"[]", 400),
        ("/v1/result", b'{"status": "won"}', 400),
        ("/v1/nowhere", b"{}", 405),
    ],
)
async def test_malformed_requests_get_4xx_in_anthropic_shape(
    broker_env: Any, path: str, payload: bytes, status: int
) -> None:
    _, host, model, client = broker_env
    response = await client.post(
        path, content=payload, headers={"content-type": "application/json"}
    )
    assert response.status_code in (status, 404)
    assert response.json()["type"] == "error"
    assert host.rejected
    assert model.requests == []
    # The broker still serves after the bad request.
    assert (await client.get("/v1/spec")).status_code == 200


async def test_oversized_body_is_refused_before_parsing(broker_env: Any) -> None:
    _, host, _, client = broker_env
    response = await client.post(
        "/v1/transcript",
        content=b"[" + b"0," * (wire.MAX_BODY_BYTES // 2 + 10) + b"0]",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert host.rejected[-1][1] == 413


async def test_permission_for_a_tool_outside_the_definition_is_denied(broker_env: Any) -> None:
    _, host, _, client = broker_env
    response = await client.post(
        "/v1/permission", json={"tool_use_id": "t1", "tool_name": "Write", "tool_input": {}}
    )
    assert response.json()["behavior"] == "deny"
    assert "Bash, Read" in response.json()["reason"]
    assert host.permissions == []  # never reached the host's policy


async def test_result_can_be_posted_once(broker_env: Any) -> None:
    broker, _host, _, client = broker_env
    first = await client.post("/v1/result", json={"status": "completed", "text": "done"})
    second = await client.post("/v1/result", json={"status": "completed", "text": "forged"})
    assert first.status_code == 200 and second.status_code == 409
    assert broker.result is not None and broker.result.text == "done"


async def test_delegation_refused_when_task_tool_not_granted(broker_env: Any) -> None:
    _, _, _, client = broker_env
    response = await client.post("/v1/task", json={"tool_use_id": "t", "input": {}})
    assert response.json()["is_error"] is True
