"""Where a run's spans go when the user configured OTLP: an OTLP/HTTP exporter whose
failures cost a bounded time and one line of warden's own, never the run.

The standard variables keep their meaning: `OTEL_EXPORTER_OTLP_*` (read by the
exporter itself), `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (the resource;
`warden` is the service name only when neither names one). A collector that does not
answer would otherwise hold the run's end for the exporter's retries (about 8 s)
and print the SDK's own log lines; here each export is bounded by
EXPORT_TIMEOUT_S unless `OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT` says otherwise, the
SDK's loggers are kept off the terminal, and one warning says the traces were lost.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from orchestrator.tracing.ids import _RunIds

DEFAULT_SERVICE_NAME = "warden"
EXPORT_TIMEOUT_S = 2.0
"""Longest one export to the collector may take (unless the user's variables say)."""
FLUSH_TIMEOUT_MS = 3_000
"""Longest the run's end waits for its spans to leave."""
SDK_LOGGERS = ("opentelemetry.exporter.otlp", "opentelemetry.sdk")
TIMEOUT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")


class _Watched(SpanExporter):
    """The OTLP exporter, remembering whether any export failed."""

    def __init__(self, inner: OTLPSpanExporter) -> None:
        self.inner = inner
        self.failed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.failed = True
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it untyped

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


_watched: dict[int, _Watched] = {}


def otlp_provider() -> TracerProvider:
    """A provider exporting over OTLP/HTTP where the OTEL_EXPORTER_OTLP_* variables say."""
    env = os.environ
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME})
    timeout = None if any(env.get(v) for v in TIMEOUT_VARS) else EXPORT_TIMEOUT_S
    exporter = _Watched(
        OTLPSpanExporter() if timeout is None else OTLPSpanExporter(timeout=timeout)
    )
    for name in SDK_LOGGERS:  # their lines would be raw SDK text on the user's terminal
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    provider = TracerProvider(resource=resource, id_generator=_RunIds())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _watched[id(provider)] = exporter
    return provider


def flush(provider: TracerProvider, *, own: bool) -> None:
    """Send what is left, bounded; shut our own provider down; one line if lost."""
    try:
        provider.force_flush(timeout_millis=FLUSH_TIMEOUT_MS)
        if own:
            provider.shutdown()
    except Exception:  # an unreachable collector must not fail the run
        pass
    exporter = _watched.pop(id(provider), None)
    if exporter is not None and exporter.failed:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT", ""
        )
        print(
            f"warden: warning: the run's traces could not be sent to {endpoint[:200]} "
            "(no answer or an error); the run itself is unaffected",
            file=sys.stderr,
            flush=True,
        )
