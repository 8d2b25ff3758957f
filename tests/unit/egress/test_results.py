"""The result document lists, per task, the destinations its sandbox asked the egress
proxy for: connections allowed and refused (from the audit) and bytes (from the
task's egress_summary event)."""

from __future__ import annotations

import time

from orchestrator.results.build import task_summaries
from orchestrator.results.models import Event
from orchestrator.store import AuditRecord, TaskRecord, TaskStatus


def audit(host: str, port: int, final: str) -> AuditRecord:
    return AuditRecord(
        run_id="run_1", task_id="sa_1", agent_type="bash", tool_name="Network",
        input_hash="h" * 64, tool_input={"host": host, "port": port, "method": "CONNECT"},
        decision="allow" if final == "allow" else "deny", final=final,  # type: ignore[arg-type]
        decided_by="rule: pypi.org", source="cli:--allow-domain",
    )  # fmt: skip


def test_destinations_per_task() -> None:
    task = TaskRecord(
        task_id="sa_1", run_id="run_1", session_id="sa_1", agent_type="bash", description="d",
        prompt="p", status=TaskStatus.COMPLETED, depth=1, created_at=time.time(),
    )  # fmt: skip
    summary = Event(
        kind="egress_summary", run_id="run_1", task_id="sa_1",
        data={"destinations": [{"host": "pypi.org", "port": 443, "bytes_up": 10, "bytes_down": 99}]},
    )  # fmt: skip
    records = [audit("pypi.org", 443, "allow"), audit("pypi.org", 443, "allow"),
               audit("evil.test", 443, "deny")]  # fmt: skip
    (summary_of_task,), denials = task_summaries([task], [summary], records)
    uses = {(u.host, u.port): u for u in summary_of_task.egress}
    assert (uses["pypi.org", 443].connections, uses["pypi.org", 443].bytes_down) == (2, 99)
    assert uses["evil.test", 443].refused == 1 and uses["evil.test", 443].connections == 0
    assert [d.tool_name for d in denials] == ["Network"]
