"""The id generator that gives a run's root span the run's own trace id."""

from __future__ import annotations

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator


class _RunIds(RandomIdGenerator):
    """Gives the run's root span the run's own trace id, so events and spans match."""

    def __init__(self) -> None:
        self.next_trace_id: int | None = None

    def generate_trace_id(self) -> int:
        if self.next_trace_id is not None:
            trace_id, self.next_trace_id = self.next_trace_id, None
            return trace_id
        return super().generate_trace_id()
