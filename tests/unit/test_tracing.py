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
from orchestrator.tracing.spans import _RunIds
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
    return Event(
        kind=kind, run_id="run_1", task_id=task_id, parent_id=parent, ts=1000 + ts, data=data
    )


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
    tracer(_event("task_started", "sa_a", agent_type="bash", description="outer"))
    tracer(_event("task_running", "sa_a", ts=1, event="tool_started", tool_name="Bash",
                  tool_use_id="tu1", detail="ls"))  # fmt: skip
    tracer(_event("task_running", "sa_a", ts=2, event="tool_finished", tool_name="Bash",
                  tool_use_id="tu1"))  # fmt: skip
    tracer(_event("task_started", "sa_b", parent="sa_a", ts=3, description="inner"))
    client = model_client("http://model.test", None, http_client=_overloaded_once())
    upstream = tracer.upstream_for(Upstream(client, stream=False), "sa_b", "sa_a")
    answer = await forward_messages(upstream, {"model": "m-1", "messages": []}, [], None)
    assert answer.status == 200 and answer.retries == 1
    tracer(_event("task_failed", "sa_b", parent="sa_a", ts=4, status="failed", tokens=18,
                  turns=1, duration_s=1.0, error="boom"))  # fmt: skip
    tracer(_event("task_completed", "sa_a", ts=5, status="completed", tokens=100, turns=2,
                  duration_s=5.0))  # fmt: skip
    response = Message(
        id="msg_1",
        content=[],
        model="parent-m",
        role="assistant",
        stop_reason="end_turn",
        type="message",
        usage=Usage(input_tokens=3, output_tokens=0),
    )
    request = ModelRequest(model="parent-m", max_tokens=1, system=[], messages=[], tools=[])
    await tracer.parent_model_call(request, response, 1000.0, 1000.5)
    tracer.set_outcome("completed")
    tracer.finish()

    spans = _by_name(exporter.get_finished_spans())
    (run,) = spans["warden.run"]
    tasks = {s.attributes["warden.task_id"]: s for s in spans["warden.task"]}  # type: ignore[index]
    (tool,) = spans["tool Bash"]
    models = spans["model call"]
    assert {f"{s.context.trace_id:032x}" for group in spans.values() for s in group} == {TRACE_ID}
    assert run.parent is None and run.attributes["warden.tokens"] == 118  # type: ignore[index]
    assert tasks["sa_a"].parent.span_id == run.context.span_id  # type: ignore[union-attr]
    assert tasks["sa_b"].parent.span_id == tasks["sa_a"].context.span_id  # type: ignore[union-attr]
    assert tool.parent.span_id == tasks["sa_a"].context.span_id  # type: ignore[union-attr]
    assert (tool.end_time - tool.start_time) == 1_000_000_000  # type: ignore[operator]
    assert tasks["sa_b"].attributes["warden.tokens"] == 18  # type: ignore[index]
    assert not tasks["sa_b"].status.is_ok and tasks["sa_a"].status.is_unset
    busy, sub_call = (s for s in models if s.parent.span_id == tasks["sa_b"].context.span_id)  # type: ignore[union-attr]
    # One span per attempt: the SDK's retry on the host shows in the trace.
    assert busy.attributes["http.response.status_code"] == 529 and not busy.status.is_ok  # type: ignore[index]
    assert sub_call.attributes["warden.attempt"] == 2  # type: ignore[index]
    assert sub_call.attributes["gen_ai.usage.input_tokens"] == 11  # type: ignore[index]
    assert sub_call.attributes["gen_ai.request.model"] == "m-1"  # type: ignore[index]
    parent_call = next(s for s in models if s.parent.span_id == run.context.span_id)  # type: ignore[union-attr]
    assert parent_call.attributes["warden.duration_s"] == 0.5  # type: ignore[index]


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
