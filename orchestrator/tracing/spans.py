"""The spans of a run (see `orchestrator.tracing`): built from its events, the
parent's model-call hook and each broker's upstream attempts."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from orchestrator.jsontypes import JSONValue
from orchestrator.results.models import TASK_END_KINDS, Event

if TYPE_CHECKING:
    from anthropic.types import Message

    from orchestrator.broker import Upstream
    from orchestrator.broker.upstream import Attempt
    from orchestrator.results.parent_transcript import ModelRequest

log = logging.getLogger(__name__)

TRACER_NAME = "warden"
ATTRIBUTE_CHARS = 200
"""Longest string attribute taken from container or workspace text."""


class _RunIds(RandomIdGenerator):
    """Gives the run's root span the run's own trace id, so events and spans match."""

    def __init__(self) -> None:
        self.next_trace_id: int | None = None

    def generate_trace_id(self) -> int:
        if self.next_trace_id is not None:
            trace_id, self.next_trace_id = self.next_trace_id, None
            return trace_id
        return super().generate_trace_id()


def otlp_provider() -> TracerProvider:
    """A provider exporting over OTLP/HTTP where the OTEL_EXPORTER_OTLP_* variables say."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(
        resource=Resource.create({"service.name": "warden"}), id_generator=_RunIds()
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _text(value: object) -> str:
    from orchestrator.untrusted_text import printable

    return printable(value, ATTRIBUTE_CHARS)


def _ns(ts: float) -> int:
    return int(ts * 1_000_000_000)


def _usage(payload: JSONValue) -> dict[str, int]:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    out = {}
    for key in ("input_tokens", "output_tokens"):
        value = usage.get(key) if isinstance(usage, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[f"gen_ai.usage.{key}"] = value
    return out


class RunTracer:
    """The spans of one run. Feed it events (it is an event listener)."""

    def __init__(self, provider: TracerProvider, run_id: str, trace_id: str, *, own: bool) -> None:
        self.provider = provider
        self.own = own
        self.tracer = provider.get_tracer(TRACER_NAME)
        ids = provider.id_generator
        if isinstance(ids, _RunIds):
            ids.next_trace_id = int(trace_id, 16)
        self.run_span = self.tracer.start_span(
            "warden.run", kind=SpanKind.INTERNAL, attributes={"warden.run_id": run_id}
        )
        self.tasks: dict[str, Span] = {}
        self.tools: dict[tuple[str, str], Span] = {}
        self.tokens: dict[str, int] = {}

    @classmethod
    def create(
        cls, run_id: str, trace_id: str, provider: TracerProvider | None = None
    ) -> RunTracer:
        """A tracer for the run: on `provider`, or (None) on an OTLP exporter, which
        the caller (`orchestrator.tracing.run_tracer`) found configured."""
        if provider is not None:
            return cls(provider, run_id, trace_id, own=False)
        return cls(otlp_provider(), run_id, trace_id, own=True)

    @property
    def trace_id(self) -> str:
        return f"{self.run_span.get_span_context().trace_id:032x}"

    # -- spans from events ------------------------------------------------

    def task_span(self, task_id: str, parent_id: str | None, ts: float | None = None) -> Span:
        span = self.tasks.get(task_id)
        if span is None:
            parent = self.tasks.get(parent_id or "", self.run_span)
            span = self.tracer.start_span(
                "warden.task",
                context=trace.set_span_in_context(parent),
                start_time=_ns(ts or time.time()),
                attributes={"warden.task_id": task_id},
            )
            self.tasks[task_id] = span
        return span

    def __call__(self, event: Event) -> None:
        if event.task_id is None:
            return
        span = self.task_span(event.task_id, event.parent_id, event.ts)
        data = event.data
        if event.kind == "task_started":
            span.set_attribute("warden.agent_type", _text(event.agent_type))
            span.set_attribute("warden.description", _text(data.get("description", "")))
            if event.parent_id:
                span.set_attribute("warden.parent_id", event.parent_id)
        elif event.kind == "task_running":
            self._tool(span, event)
        elif event.kind == "permission_denied":
            span.add_event("permission_denied", {"warden.tool_name": _text(data.get("tool_name"))})
        elif event.kind in TASK_END_KINDS:
            self._end_task(event.task_id, event)

    def _tool(self, task: Span, event: Event) -> None:
        data = event.data
        assert event.task_id is not None
        key = (event.task_id, str(data.get("tool_use_id") or data.get("tool_name")))
        if data.get("event") == "tool_started" and key not in self.tools:
            self.tools[key] = self.tracer.start_span(
                f"tool {_text(data.get('tool_name'))}",
                context=trace.set_span_in_context(task),
                start_time=_ns(event.ts),
                attributes={
                    "warden.tool_name": _text(data.get("tool_name")),
                    "warden.tool_detail": _text(data.get("detail") or ""),
                },
            )
        elif data.get("event") == "tool_finished" and key in self.tools:
            span = self.tools.pop(key)
            if data.get("is_error"):
                span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=_ns(event.ts))

    def _end_task(self, task_id: str, event: Event) -> None:
        span = self.tasks[task_id]
        data = event.data
        status = str(data.get("status", event.kind.removeprefix("task_")))
        span.set_attribute("warden.status", status)
        tokens = data.get("tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            self.tokens[task_id] = tokens
        for key in ("tokens", "turns", "duration_s"):
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                span.set_attribute(f"warden.{key}", value)
        if status not in ("completed", "no_output"):
            span.set_status(Status(StatusCode.ERROR, _text(data.get("error") or status)))
        for open_tool in [k for k in self.tools if k[0] == task_id]:
            self.tools.pop(open_tool).end(end_time=_ns(event.ts))
        span.end(end_time=_ns(event.ts))

    # -- model calls ------------------------------------------------------

    async def parent_model_call(
        self, request: ModelRequest, response: Message, started: float, ended: float
    ) -> None:
        """ObservedClient hook: one span per model call of the parent agent."""
        payload: JSONValue = {"usage": response.usage.model_dump(mode="json")}
        self._model_span(self.run_span, request["model"], started, ended, payload, 200)

    def _model_span(
        self,
        parent: Span,
        model: str,
        started: float,
        ended: float,
        payload: JSONValue,
        status: int | None,
        *,
        attempt: int = 1,
    ) -> None:
        attributes: dict[str, str | int | float] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": _text(model),
            "warden.duration_s": round(ended - started, 3),
            "warden.attempt": attempt,
            **_usage(payload),
        }
        if status is not None:
            attributes["http.response.status_code"] = status
        span = self.tracer.start_span(
            "model call",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            start_time=_ns(started),
            attributes=attributes,
        )
        if status != 200:
            span.set_status(Status(StatusCode.ERROR, f"HTTP {status}" if status else "no answer"))
        span.end(end_time=_ns(ended))

    def upstream_for(self, upstream: Upstream, task_id: str, parent_id: str | None) -> Upstream:
        """`upstream` whose model calls are spans under the task's span (one per
        HTTP attempt, so the SDK's retries on the host show)."""

        def on_attempt(model: str, attempt: Attempt) -> None:
            task = self.task_span(task_id, parent_id)
            self._model_span(
                task, model, attempt.started, attempt.ended, attempt.payload, attempt.status,
                attempt=attempt.number,
            )  # fmt: skip

        return dataclasses.replace(upstream, on_attempt=on_attempt)

    # -- the end ----------------------------------------------------------

    def set_outcome(self, status: str) -> None:
        """How the run ended (its span's status)."""
        self.run_span.set_attribute("warden.status", status)
        if status != "completed":
            self.run_span.set_status(Status(StatusCode.ERROR, status))

    def finish(self) -> None:
        """End every open span (the run's last) and flush the exporter."""
        now = time.time()
        for span in self.tools.values():
            span.end(end_time=_ns(now))
        for span in self.tasks.values():
            if span.is_recording():
                span.end(end_time=_ns(now))
        self.run_span.set_attribute("warden.tokens", sum(self.tokens.values()))
        if self.run_span.is_recording():
            self.run_span.end()
        try:
            self.provider.force_flush()
            if self.own:
                self.provider.shutdown()
        except Exception:  # an unreachable collector must not fail the run
            log.warning("could not export the run's traces", exc_info=True)
