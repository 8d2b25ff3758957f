"""OpenTelemetry traces of a run: one span per run, subagent task, model call and
tool call, under the run's W3C trace id (the `trace_id` of every event).

Tracing wraps what it observes instead of being sprinkled through the code: task
and tool spans come from the run's event stream (a listener), the parent's model
calls from a hook on its client (`ObservedClient`), and a subagent's model calls
from a wrapper around the HTTP client its broker forwards them with.

It is off unless the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (then spans go over OTLP/HTTP to exactly
that endpoint; the exporter reads the other `OTEL_EXPORTER_OTLP_*` variables itself)
or a caller passes its own `TracerProvider` (the tests use the SDK's in-memory
exporter). Neither the SDK nor the exporter is imported while tracing is off.
Token counts and durations are span attributes; container text enters a span only
as a bounded plain string. Names and attributes follow OpenTelemetry's generative-AI
semantic conventions (`spans`); `TRACEPARENT` continues a caller's trace;
`OTEL_SERVICE_NAME` names the service; a dead collector costs a few seconds at most
and one warning (`export`).

May import: `results` (event models), `untrusted_text`; `broker` for types only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from orchestrator.tracing.spans import RunTracer

OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otlp_configured(environ: Mapping[str, str] | None = None) -> bool:
    """True when the user configured an OTLP endpoint (and did not disable the SDK)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return any(env.get(name) for name in OTLP_ENDPOINT_VARS)


def run_tracer(
    run_id: str, trace_id: str, provider: TracerProvider | None = None
) -> RunTracer | None:
    """The run's tracer, or None when tracing is off (nothing imported then). A W3C
    `TRACEPARENT` in the environment (as CI systems and `otel-cli` set it) makes the
    run a child of that span, in that trace: the run's trace id is then the caller's."""
    if provider is None and not otlp_configured():
        return None
    from orchestrator.tracing.spans import RunTracer

    parent = None
    traceparent = os.environ.get("TRACEPARENT", "").strip()
    if traceparent:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        context = TraceContextTextMapPropagator().extract(
            {"traceparent": traceparent, "tracestate": os.environ.get("TRACESTATE", "")}
        )
        if trace.get_current_span(context).get_span_context().is_valid:
            parent = context
    return RunTracer.create(run_id, trace_id, provider, parent)
