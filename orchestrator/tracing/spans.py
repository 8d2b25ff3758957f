"""The spans of a run (see `orchestrator.tracing`): built from its events, the
parent's model-call hook and each broker's upstream attempts.

Names and attributes follow OpenTelemetry's generative-AI semantic conventions (the
`opentelemetry-semantic-conventions` package's constants): the run and each
subagent task are `invoke_agent {agent}` spans, a tool call is `execute_tool
{tool}`, a model call is `chat {model}` (kind CLIENT) with the provider, request and
response model, response id, finish reasons, `max_tokens` and every usage field
(cache reads and writes included). A task's span starts when its Task call was
accepted and holds a `queue` span (when it waited for a slot) and a `container
start` span; a nested task is the child of the `execute_tool Task` span that started
it, and each of the parent agent's Task calls is an `execute_tool Task` span too.
warden's own identifiers stay in the `warden.*` namespace.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes, http_attributes
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from orchestrator.jsontypes import JSONValue
from orchestrator.results.models import TASK_END_KINDS, Event
from orchestrator.tracing.ids import _RunIds

if TYPE_CHECKING:
    from anthropic.types import Message
    from opentelemetry.context import Context

    from orchestrator.broker import Upstream
    from orchestrator.broker.model_calls import Attempt
    from orchestrator.results.parent_transcript import ModelRequest

log = logging.getLogger(__name__)

TRACER_NAME = "warden"
ATTRIBUTE_CHARS = 200
"""Longest string attribute taken from container or workspace text."""
PROVIDER = gen_ai.GenAiProviderNameValues.ANTHROPIC.value
PARENT_AGENT = "parent"
"""`gen_ai.agent.name` of the run's own (parent) agent."""
INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
EXECUTE_TOOL = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
USAGE_ATTRIBUTES = {
    "input_tokens": gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
    "output_tokens": gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
    "cache_creation_input_tokens": gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    "cache_read_input_tokens": gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
}
"""The Messages API's usage fields and the convention's attribute for each."""


def _text(value: object) -> str:
    from orchestrator.untrusted_text import printable

    return printable(value, ATTRIBUTE_CHARS)


def _ns(ts: float) -> int:
    return int(ts * 1_000_000_000)


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _response_attributes(payload: JSONValue) -> dict[str, str | int | Sequence[str]]:
    """The convention's response attributes from a Messages API answer's JSON."""
    if not isinstance(payload, dict):
        return {}
    out: dict[str, str | int | Sequence[str]] = {}
    usage = payload.get("usage")
    for field, attribute in USAGE_ATTRIBUTES.items():
        value = _count(usage.get(field) if isinstance(usage, dict) else None)
        if value is not None:
            out[attribute] = value
    # The convention's input tokens include cached ones; the Messages API's
    # `input_tokens` counts only those after the last cache breakpoint, so a cached
    # run's input would read ~90 % low. The cache fields stay as they are, beside it.
    counts = {
        field: _count(usage.get(field)) if isinstance(usage, dict) else None
        for field in USAGE_ATTRIBUTES
    }
    if counts["input_tokens"] is not None:
        out[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = sum(
            counts[field] or 0
            for field in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
    if isinstance(payload.get("id"), str):
        out[gen_ai.GEN_AI_RESPONSE_ID] = _text(payload["id"])
    if isinstance(payload.get("model"), str):
        out[gen_ai.GEN_AI_RESPONSE_MODEL] = _text(payload["model"])
    if isinstance(payload.get("stop_reason"), str):
        out[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = [_text(payload["stop_reason"])]
    return out


def _error_type(payload: JSONValue, status: int | None) -> str:
    """`error.type`: the API's error type when it sent one, else the HTTP status."""
    error = payload.get("error") if isinstance(payload, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    if isinstance(kind, str) and kind:
        return _text(kind)
    return str(status) if status is not None else "no_answer"


class RunTracer:
    """The spans of one run. Feed it events (it is an event listener)."""

    def __init__(
        self,
        provider: TracerProvider,
        run_id: str,
        trace_id: str,
        *,
        own: bool,
        parent_context: Context | None = None,
    ) -> None:
        self.provider = provider
        self.own = own
        self.tracer = provider.get_tracer(TRACER_NAME)
        ids = provider.id_generator
        if isinstance(ids, _RunIds) and parent_context is None:
            ids.next_trace_id = int(trace_id, 16)
        self.run_span = self.tracer.start_span(
            f"{INVOKE_AGENT} {PARENT_AGENT}",
            context=parent_context,
            kind=SpanKind.INTERNAL,
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: INVOKE_AGENT,
                gen_ai.GEN_AI_PROVIDER_NAME: PROVIDER,
                gen_ai.GEN_AI_AGENT_NAME: PARENT_AGENT,
                gen_ai.GEN_AI_CONVERSATION_ID: run_id,
                "warden.run_id": run_id,
            },
        )
        self.tasks: dict[str, Span] = {}
        self.tools: dict[tuple[str, str], Span] = {}
        self.delegations: dict[str, Span] = {}
        """A top-level task's `execute_tool Task` span (the parent agent's call)."""
        self.open_task_calls: list[tuple[str, str]] = []
        """Open `execute_tool Task` spans of subagents, oldest first, not yet given a
        child task: a nested task hangs under the first of its parent's."""
        self.tokens: dict[str, int] = {}

    @classmethod
    def create(
        cls,
        run_id: str,
        trace_id: str,
        provider: TracerProvider | None = None,
        parent_context: Context | None = None,
    ) -> RunTracer:
        """A tracer for the run: on `provider`, or (None) on an OTLP exporter, which
        the caller (`orchestrator.tracing.run_tracer`) found configured."""
        if provider is not None:
            return cls(provider, run_id, trace_id, own=False, parent_context=parent_context)
        from orchestrator.tracing.export import otlp_provider

        return cls(otlp_provider(), run_id, trace_id, own=True, parent_context=parent_context)

    @property
    def trace_id(self) -> str:
        return f"{self.run_span.get_span_context().trace_id:032x}"

    # -- spans from events ------------------------------------------------

    def _start(
        self, name: str, parent: Span, ts: float, attributes: dict[str, str | int]
    ) -> Span:
        return self.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            start_time=_ns(ts),
            attributes=attributes,
        )

    def task_span(self, task_id: str, parent_id: str | None, ts: float | None = None) -> Span:
        span = self.tasks.get(task_id)
        if span is None:
            span = self._start(
                INVOKE_AGENT,
                self._delegating_span(task_id, parent_id, ts or time.time()),
                ts or time.time(),
                {
                    gen_ai.GEN_AI_OPERATION_NAME: INVOKE_AGENT,
                    gen_ai.GEN_AI_PROVIDER_NAME: PROVIDER,
                    gen_ai.GEN_AI_AGENT_ID: task_id,
                    "warden.task_id": task_id,
                },
            )
            self.tasks[task_id] = span
        return span

    def _delegating_span(self, task_id: str, parent_id: str | None, ts: float) -> Span:
        """The span a new task hangs under: its parent task's open `execute_tool Task`
        span (the oldest not yet given a child), or a new `execute_tool Task` span
        under the run for a Task call of the parent agent."""
        parent_task = self.tasks.get(parent_id or "")
        if parent_task is None:
            span = self._start(
                f"{EXECUTE_TOOL} Task",
                self.run_span,
                ts,
                {gen_ai.GEN_AI_OPERATION_NAME: EXECUTE_TOOL, gen_ai.GEN_AI_TOOL_NAME: "Task"},
            )
            self.delegations[task_id] = span
            return span
        for key in self.open_task_calls:
            if key[0] == parent_id and key in self.tools:
                self.open_task_calls.remove(key)
                return self.tools[key]
        return parent_task

    def __call__(self, event: Event) -> None:
        if event.task_id is None:
            return
        data = event.data
        started = event.ts
        if event.kind == "task_started" and event.task_id not in self.tasks:
            since = data.get("since_created_s")
            if isinstance(since, int | float) and not isinstance(since, bool) and since >= 0:
                started = event.ts - since
        span = self.task_span(event.task_id, event.parent_id, started)
        if event.kind == "task_started":
            self._started(span, event)
        elif event.kind == "task_running":
            self._tool(span, event)
        elif event.kind == "permission_denied":
            self._denied(span, event)
        elif event.kind in TASK_END_KINDS:
            self._end_task(event.task_id, event)

    def _started(self, span: Span, event: Event) -> None:
        data = event.data
        if event.agent_type:
            agent = _text(event.agent_type)
            span.update_name(f"{INVOKE_AGENT} {agent}")
            span.set_attribute(gen_ai.GEN_AI_AGENT_NAME, agent)
            span.set_attribute("warden.agent_type", agent)
        span.set_attribute(gen_ai.GEN_AI_AGENT_DESCRIPTION, _text(data.get("description", "")))
        if event.parent_id:
            span.set_attribute("warden.parent_id", event.parent_id)
        start_s, queued_s = data.get("container_start_s"), data.get("queued_s")
        if isinstance(start_s, int | float) and not isinstance(start_s, bool) and start_s >= 0:
            self._start(
                "container start", span, event.ts - start_s, {"warden.task_id": event.task_id or ""}
            ).end(end_time=_ns(event.ts))
            if isinstance(queued_s, int | float) and not isinstance(queued_s, bool) and queued_s > 0:
                queue_end = event.ts - start_s
                self._start(
                    "queue", span, queue_end - queued_s, {"warden.task_id": event.task_id or ""}
                ).end(end_time=_ns(queue_end))
        delegation = self.delegations.get(event.task_id or "")
        if delegation is not None and isinstance(data.get("call_id"), str):
            delegation.set_attribute(gen_ai.GEN_AI_TOOL_CALL_ID, _text(data["call_id"]))
            delegation.set_attribute(gen_ai.GEN_AI_TOOL_TYPE, "function")
        if delegation is not None and data.get("background"):
            delegation.end(end_time=_ns(event.ts))  # a background Task call returns at once

    def _tool(self, task: Span, event: Event) -> None:
        data = event.data
        assert event.task_id is not None
        call_id = str(data.get("tool_use_id") or data.get("tool_name"))
        key = (event.task_id, call_id)
        name = _text(data.get("tool_name"))
        if data.get("event") == "tool_started" and key not in self.tools:
            self.tools[key] = self._start(
                f"{EXECUTE_TOOL} {name}",
                task,
                event.ts,
                {
                    gen_ai.GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
                    gen_ai.GEN_AI_TOOL_NAME: name,
                    gen_ai.GEN_AI_TOOL_CALL_ID: _text(call_id),
                    gen_ai.GEN_AI_TOOL_TYPE: "function",
                    "warden.tool_detail": _text(data.get("detail") or ""),
                },
            )
            if name == "Task":
                self.open_task_calls.append(key)
        elif data.get("event") == "tool_finished" and key in self.tools:
            span = self.tools.pop(key)
            if data.get("is_error"):
                span.set_attribute(error_attributes.ERROR_TYPE, "tool_error")
                span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=_ns(event.ts))

    def _denied(self, task: Span, event: Event) -> None:
        """A call the policy (or a person) refused never runs, so no `task_running`
        starts its span: it gets an `execute_tool` span of its own, ended at once with
        `error.type` `permission_denied`."""
        data = event.data
        name = _text(data.get("tool_name"))
        task.add_event("permission_denied", {"warden.tool_name": name})
        attributes: dict[str, str | int] = {
            gen_ai.GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
            error_attributes.ERROR_TYPE: "permission_denied",
            "warden.decided_by": _text(data.get("decided_by") or ""),
            "warden.reason": _text(data.get("reason") or ""),
        }
        if data.get("tool_use_id"):
            attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = _text(data["tool_use_id"])
        span = self._start(f"{EXECUTE_TOOL} {name}", task, event.ts, attributes)
        span.set_status(Status(StatusCode.ERROR, "permission denied"))
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
            span.set_attribute(error_attributes.ERROR_TYPE, status)
            span.set_status(Status(StatusCode.ERROR, _text(data.get("error") or status)))
        for open_tool in [k for k in self.tools if k[0] == task_id]:
            self.tools.pop(open_tool).end(end_time=_ns(event.ts))
        span.end(end_time=_ns(event.ts))
        delegation = self.delegations.pop(task_id, None)
        if delegation is not None and delegation.is_recording():
            if status not in ("completed", "no_output"):
                delegation.set_attribute(error_attributes.ERROR_TYPE, status)
                delegation.set_status(Status(StatusCode.ERROR))
            delegation.end(end_time=_ns(event.ts))

    # -- model calls ------------------------------------------------------

    async def parent_model_call(
        self, request: ModelRequest, response: Message, started: float, ended: float
    ) -> None:
        """ObservedClient hook: one span per model call of the parent agent."""
        payload: JSONValue = response.model_dump(mode="json", include={"id", "model", "stop_reason", "usage"})
        self._model_span(
            self.run_span, dict(request), started, ended, payload, 200  # type: ignore[arg-type]
        )

    def _model_span(
        self,
        parent: Span,
        body: dict[str, JSONValue],
        started: float,
        ended: float,
        payload: JSONValue,
        status: int | None,
        *,
        attempt: int = 1,
    ) -> None:
        model = _text(body.get("model"))
        attributes: dict[str, str | int | float | Sequence[str]] = {
            gen_ai.GEN_AI_OPERATION_NAME: CHAT,
            gen_ai.GEN_AI_PROVIDER_NAME: PROVIDER,
            gen_ai.GEN_AI_REQUEST_MODEL: model,
            "warden.duration_s": round(ended - started, 3),
            "warden.attempt": attempt,
            **_response_attributes(payload),
        }
        max_tokens = _count(body.get("max_tokens"))
        if max_tokens is not None:
            attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
        if body.get("stream") is True:
            attributes[gen_ai.GEN_AI_REQUEST_STREAM] = True
        if status is not None:
            attributes[http_attributes.HTTP_RESPONSE_STATUS_CODE] = status
        span = self.tracer.start_span(
            f"{CHAT} {model}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            start_time=_ns(started),
            attributes=attributes,
        )
        if status != 200:
            span.set_attribute(error_attributes.ERROR_TYPE, _error_type(payload, status))
            span.set_status(Status(StatusCode.ERROR, f"HTTP {status}" if status else "no answer"))
        span.end(end_time=_ns(ended))

    def upstream_for(self, upstream: Upstream, task_id: str, parent_id: str | None) -> Upstream:
        """`upstream` whose model calls are spans under the task's span (one per
        HTTP attempt, so the SDK's retries on the host show)."""

        def on_attempt(body: dict[str, JSONValue], attempt: Attempt) -> None:
            task = self.task_span(task_id, parent_id)
            self._model_span(
                task, body, attempt.started, attempt.ended, attempt.payload, attempt.status,
                attempt=attempt.number,
            )  # fmt: skip

        return dataclasses.replace(upstream, on_attempt=on_attempt)

    # -- the end ----------------------------------------------------------

    def set_outcome(self, status: str) -> None:
        """How the run ended (its span's status)."""
        self.run_span.set_attribute("warden.status", status)
        if status != "completed":
            self.run_span.set_attribute(error_attributes.ERROR_TYPE, status)
            self.run_span.set_status(Status(StatusCode.ERROR, status))

    def finish(self) -> None:
        """End every open span (the run's last) and flush the exporter, bounded: a
        collector that does not answer costs at most `export.FLUSH_TIMEOUT_MS` and one
        warning line, never the run."""
        from orchestrator.tracing.export import flush

        now = time.time()
        for span in [*self.tools.values(), *self.delegations.values(), *self.tasks.values()]:
            if span.is_recording():
                span.end(end_time=_ns(now))
        self.run_span.set_attribute("warden.tokens", sum(self.tokens.values()))
        if self.run_span.is_recording():
            self.run_span.end()
        flush(self.provider, own=self.own)
