"""Model API errors, through the real anthropic SDK against the scripted server:
429/5xx/529 are retried (honouring retry-after) up to the attempt count and the
total-wait budget; 400/402 and spend limits are never retried; what is left is
one line naming the cause and what to do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from orchestrator.broker.model_calls import STOP_HEADER
from orchestrator.broker.retry import RetryBudget
from orchestrator.runtime.model_errors import ModelError, describe, from_sdk_error
from orchestrator.scripted import Script, ScriptedModelServer
from tests.unit.broker.test_upstream import _convo

MODEL = "claude-scripted"

SCRIPT = Script(
    conversations=[
        _convo("overloaded", status=529, retry_after_s=0.01, times=5),
        _convo("always-busy", status=529, retry_after_s=0.05),
        _convo("slow-down", status=429, retry_after_s=30, times=1),
        _convo("billing", status=402, message="Your credit balance is too low"),
        _convo("spend", status=429, message="You have reached your spend limit for the month"),
        _convo("invalid", status=400, message="messages: something is wrong", times=1),
        _convo("raw", status=500, body={"type": "error", "error": {"type": "x", "message": "y"}}),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCRIPT).in_thread() as running:
        yield running


def ask(client: anthropic.Anthropic, prompt: str) -> Any:
    return client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": prompt}]
    )


def attempts(server: ScriptedModelServer, conversation: str) -> int:
    return sum(1 for r in server.requests if r.conversation == conversation)


def client_for(server: ScriptedModelServer, retries: int, total_s: float) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=server.base_url,
        api_key="x",
        max_retries=retries,
        middleware=[RetryBudget(total_s)],
    )


def test_overloaded_five_times_then_success_is_retried_to_success(
    server: ScriptedModelServer,
) -> None:
    with client_for(server, 8, 60) as client:
        reply = ask(client, "overloaded")
    assert reply.content[0].type == "text" and reply.content[0].text == "overloaded ok"
    assert attempts(server, "overloaded") == 6


def test_retries_stop_at_the_attempt_count_with_a_line_that_says_so(
    server: ScriptedModelServer,
) -> None:
    with client_for(server, 3, 60) as client, pytest.raises(anthropic.APIStatusError) as caught:
        ask(client, "always-busy")
    assert attempts(server, "always-busy") == 4
    line = str(from_sdk_error(caught.value, max_retries=3))
    assert line.startswith("the model API answered HTTP 529 overloaded_error: scripted error")
    assert "after 4 attempts" in line
    assert "WARDEN_MODEL_MAX_RETRIES" in line and "\n" not in line


def test_a_retry_after_past_the_total_budget_is_not_waited_for(
    server: ScriptedModelServer,
) -> None:
    started = time.monotonic()
    with client_for(server, 8, 5) as client, pytest.raises(anthropic.RateLimitError) as caught:
        ask(client, "slow-down")
    assert time.monotonic() - started < 5
    assert attempts(server, "slow-down") == 1
    assert "past the retry budget of 5 s" in caught.value.response.headers[STOP_HEADER]
    assert "past the retry budget" in str(from_sdk_error(caught.value))


def test_the_total_budget_ends_retries_early(server: ScriptedModelServer) -> None:
    before = attempts(server, "always-busy")
    started = time.monotonic()
    with client_for(server, 100, 0.3) as client, pytest.raises(anthropic.APIStatusError) as caught:
        ask(client, "always-busy")
    assert time.monotonic() - started < 3
    assert 2 <= attempts(server, "always-busy") - before < 100
    assert "retry budget of 0.3 s" in str(from_sdk_error(caught.value))


@pytest.mark.parametrize(
    ("conversation", "status", "advice"),
    [
        ("billing", 402, "add credits or raise the limit"),
        ("spend", 429, "add credits or raise the limit"),
        ("invalid", 400, "report it with the run's events file"),
    ],
)
def test_billing_spend_limits_and_bad_requests_are_never_retried(
    server: ScriptedModelServer, conversation: str, status: int, advice: str
) -> None:
    with client_for(server, 8, 60) as client, pytest.raises(anthropic.APIStatusError) as caught:
        ask(client, conversation)
    assert caught.value.status_code == status
    assert attempts(server, conversation) == 1
    error = from_sdk_error(caught.value)
    assert isinstance(error, ModelError) and error.status == status
    assert "(not retried)" in str(error) and advice in str(error)


def test_a_scripted_raw_body_is_sent_as_is(server: ScriptedModelServer) -> None:
    with client_for(server, 0, 60) as client, pytest.raises(anthropic.InternalServerError) as e:
        ask(client, "raw")
    assert e.value.body == {"type": "error", "error": {"type": "x", "message": "y"}}


def test_an_unreachable_endpoint_names_the_fix() -> None:
    line = describe(None, None, "Connection refused", attempts=9)
    assert line.startswith("the model endpoint did not answer (Connection refused) after 9")
    assert "ANTHROPIC_BASE_URL" in line
