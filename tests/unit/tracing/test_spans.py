"""Locks in the run's OpenTelemetry traces without Docker: a span per run, task
(nested under its parent task), tool call and model call, all under the run's own
W3C trace id, with tokens and durations as attributes; tracing is off (and the SDK
not even imported) unless an OTLP endpoint is configured or a provider is given."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx2
import pytest
from anthropic.types import Message, Usage
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator.broker import Upstream
from orchestrator.broker.upstream import forward_messages, model_client
from orchestrator.results.models import Event
from orchestrator.results.parent_transcript import ModelRequest
from orchestrator.tracing import otlp_configured, run_tracer
from orchestrator.tracing.ids import _RunIds
from tests.conftest import warden_env

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    p = TracerProvider(id_generator=_RunIds())
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p


def _event(kind: str, task_id: str, parent: str | None = None, ts: float = 0, **data: Any) -> Event:
    agent_type = data.pop("agent_type", None)
    return Event(
        kind=kind, run_id="run_1", task_id=task_id, parent_id=parent, ts=1000 + ts, data=data,
        agent_type=agent_type,
    )  # fmt: skip


def _overloaded_once() -> httpx2.AsyncClient:
    """A model endpoint that answers 529 once, then a message with usage."""
    answers = [
        httpx2.Response(
            529,
            json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
            headers={"retry-after-ms": "1"},
        ),
        httpx2.Response(
            200, json={"content": [], "usage": {"input_tokens": 11, "output_tokens": 7}}
        ),
    ]
    return httpx2.AsyncClient(transport=httpx2.MockTransport(lambda _: answers.pop(0)))


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


async def test_spans_form_the_run_tree_under_the_runs_trace_id(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = run_tracer("run_1", TRACE_ID, provider)
    assert tracer is not None and tracer.trace_id == TRACE_ID
    tracer(_event("task_started", "sa_a", agent_type="bash", description="outer",
                  since_created_s=0.5, container_start_s=0.2, queued_s=0.25,
                  call_id="toolu_parent_1"))  # fmt: skip
    tracer(_event("task_running", "sa_a", ts=1, event="tool_started", tool_name="Bash",
                  tool_use_id="tu1", detail="ls"))  # fmt: skip
    tracer(_event("task_running", "sa_a", ts=2, event="tool_finished", tool_name="Bash",
                  tool_use_id="tu1"))  # fmt: skip
    tracer(_event("permission_denied", "sa_a", ts=2.2, tool_name="Bash", tool_use_id="tu_no",
                  decided_by="rule", reason="Bash(rm:*) denies it"))  # fmt: skip
    tracer(_event("task_running", "sa_a", ts=2.5, event="tool_started", tool_name="Task",
                  tool_use_id="tu2"))  # fmt: skip
    tracer(_event("task_started", "sa_b", parent="sa_a", ts=3, agent_type="general-purpose",
                  description="inner"))  # fmt: skip
    client = model_client("http://model.test", None, http_client=_overloaded_once())
    upstream = tracer.upstream_for(Upstream(client, stream=False), "sa_b", "sa_a")
    body = {"model": "m-1", "max_tokens": 64, "messages": []}
    answer = await forward_messages(upstream, body, [], None)  # type: ignore[arg-type]
    assert answer.status == 200 and answer.retries == 1
    tracer(_event("task_failed", "sa_b", parent="sa_a", ts=4, status="failed", tokens=18,
                  turns=1, duration_s=1.0, error="boom"))  # fmt: skip
    tracer(_event("task_running", "sa_a", ts=4.5, event="tool_finished", tool_name="Task",
                  tool_use_id="tu2"))  # fmt: skip
    tracer(_event("task_completed", "sa_a", ts=5, status="completed", tokens=100, turns=2,
                  duration_s=5.0))  # fmt: skip
    response = Message(
        id="msg_1",
        content=[],
        model="parent-m-2025",
        role="assistant",
        stop_reason="end_turn",
        type="message",
        usage=Usage(
            input_tokens=3,
            output_tokens=0,
            cache_read_input_tokens=40,
            cache_creation_input_tokens=9,
        ),
    )
    request = ModelRequest(model="parent-m", max_tokens=1, system=[], messages=[], tools=[])
    await tracer.parent_model_call(request, response, 1000.0, 1000.5)
    tracer.set_outcome("completed")
    tracer.finish()

    spans = _by_name(exporter.get_finished_spans())
    (run,) = spans["invoke_agent parent"]
    (outer,) = spans["invoke_agent bash"]
    (inner,) = spans["invoke_agent general-purpose"]
    bash, denied = sorted(spans["execute_tool Bash"], key=lambda span: span.start_time or 0)
    (parent_call,) = spans["chat parent-m"]
    assert {f"{s.context.trace_id:032x}" for group in spans.values() for s in group} == {TRACE_ID}
    assert run.parent is None and run.attributes["warden.tokens"] == 118  # type: ignore[index]
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"  # type: ignore[index]
    assert run.attributes["gen_ai.provider.name"] == "anthropic"  # type: ignore[index]
    # The parent agent's Task call is a span, and the task it started is its child.
    top_call = next(s for s in spans["execute_tool Task"] if s.parent.span_id == run.context.span_id)  # type: ignore[union-attr]
    assert outer.parent.span_id == top_call.context.span_id  # type: ignore[union-attr]
    assert top_call.attributes["gen_ai.tool.call.id"] == "toolu_parent_1"  # type: ignore[index]
    # A denied call never runs, and still is a span: ended at once, with the reason.
    assert denied.parent.span_id == outer.context.span_id  # type: ignore[union-attr]
    assert denied.attributes["gen_ai.tool.call.id"] == "tu_no"  # type: ignore[index]
    assert denied.attributes["error.type"] == "permission_denied"  # type: ignore[index]
    assert not denied.status.is_ok and denied.start_time == denied.end_time
    # A nested task is the child of the subagent's Task tool span that started it.
    nested_call = next(s for s in spans["execute_tool Task"] if s is not top_call)
    assert nested_call.parent.span_id == outer.context.span_id  # type: ignore[union-attr]
    assert inner.parent.span_id == nested_call.context.span_id  # type: ignore[union-attr]
    assert bash.parent.span_id == outer.context.span_id  # type: ignore[union-attr]
    assert bash.attributes["gen_ai.tool.name"] == "Bash"  # type: ignore[index]
    assert bash.attributes["gen_ai.tool.call.id"] == "tu1"  # type: ignore[index]
    assert (bash.end_time - bash.start_time) == 1_000_000_000  # type: ignore[operator]
    assert outer.attributes["gen_ai.agent.name"] == "bash"  # type: ignore[index]
    assert outer.attributes["gen_ai.agent.id"] == "sa_a"  # type: ignore[index]
    # The task's span starts when its Task call was accepted: queue and container start
    # are children inside it, so its length agrees with its duration.
    assert outer.start_time == 999_500_000_000
    (queue,) = spans["queue"]
    (start,) = spans["container start"]
    assert queue.parent.span_id == start.parent.span_id == outer.context.span_id  # type: ignore[union-attr]
    assert (queue.start_time, queue.end_time) == (999_550_000_000, 999_800_000_000)
    assert (start.start_time, start.end_time) == (999_800_000_000, 1_000_000_000_000)
    assert inner.attributes["warden.tokens"] == 18  # type: ignore[index]
    assert inner.attributes["error.type"] == "failed"  # type: ignore[index]
    assert not inner.status.is_ok and outer.status.is_unset
    busy, sub_call = spans["chat m-1"]
    assert busy.parent.span_id == sub_call.parent.span_id == inner.context.span_id  # type: ignore[union-attr]
    # One span per attempt: the SDK's retry on the host shows in the trace.
    assert busy.attributes["http.response.status_code"] == 529 and not busy.status.is_ok  # type: ignore[index]
    assert busy.attributes["error.type"] == "overloaded_error"  # type: ignore[index]
    assert sub_call.attributes["warden.attempt"] == 2  # type: ignore[index]
    assert sub_call.attributes["gen_ai.usage.input_tokens"] == 11  # type: ignore[index]
    assert sub_call.attributes["gen_ai.request.model"] == "m-1"  # type: ignore[index]
    assert sub_call.attributes["gen_ai.request.max_tokens"] == 64  # type: ignore[index]
    assert sub_call.kind.name == "CLIENT"
    assert parent_call.parent.span_id == run.context.span_id  # type: ignore[union-attr]
    attrs = parent_call.attributes or {}
    assert attrs["warden.duration_s"] == 0.5
    assert attrs["gen_ai.response.model"] == "parent-m-2025"
    assert attrs["gen_ai.response.id"] == "msg_1"
    assert tuple(attrs["gen_ai.response.finish_reasons"]) == ("end_turn",)  # type: ignore[arg-type]
    assert attrs["gen_ai.request.max_tokens"] == 1
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 40
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 9
    # The convention's input tokens include the cached ones (the API's 3 does not).
    assert attrs["gen_ai.usage.input_tokens"] == 3 + 40 + 9


def test_a_traceparent_makes_the_run_a_child_in_the_callers_trace(
    provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    ci_trace, ci_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    monkeypatch.setenv("TRACEPARENT", f"00-{ci_trace}-{ci_span}-01")
    tracer = run_tracer("run_1", TRACE_ID, provider)
    assert tracer is not None and tracer.trace_id == ci_trace
    tracer.finish()
    (run,) = exporter.get_finished_spans()
    assert f"{run.context.trace_id:032x}" == ci_trace
    assert run.parent is not None and f"{run.parent.span_id:016x}" == ci_span


def test_tracing_is_off_unless_an_otlp_endpoint_is_configured() -> None:
    assert not otlp_configured({})
    assert otlp_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert otlp_configured(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    )
    assert not otlp_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    )
    code = (
        "import os, sys, json; os.environ.pop('OTEL_EXPORTER_OTLP_ENDPOINT', None);"
        "os.environ.pop('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', None);"
        "from orchestrator.tracing import run_tracer; import orchestrator.runtime.session;"
        "print(json.dumps([run_tracer('run_1', '" + TRACE_ID + "') is None,"
        " any(m.startswith('opentelemetry.sdk') or m.startswith('opentelemetry.exporter')"
        " for m in sys.modules)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=warden_env(), capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [True, False]
