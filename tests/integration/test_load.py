"""Load is queued, not refused: a burst larger than max_concurrent_total (set with
`warden run --max-concurrent`) completes with every task succeeding, the queued
ones saying how long they waited, never more running at once than the cap; and
30 subagents started at once through the scripted model all succeed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.runtime.tasks import TaskStatus
from orchestrator.store import Store
from tests.conftest import result_document, run_warden, write_script
from tests.integration.harness import containers_of, fan_out, scripted_run, text

pytestmark = pytest.mark.integration

BURST = 6
CAP = 2
MODERATE_LOAD = 30


def test_a_burst_past_the_cap_is_queued_and_all_succeed(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path / "burst.yaml", fan_out(BURST, "burst", [[text("{tool_results}")]])
    )
    done = run_warden(
        settings,
        *("run", "go", "--replay", str(script), "--workspace", str(workspace), "--json"),
        *("--permission-mode", "bypassPermissions", "--max-concurrent", str(CAP)),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    final = result_document(done)
    assert final["status"] == "completed"
    assert [t["status"] for t in final["tasks"]] == ["completed"] * BURST
    # The parent's last turn quotes every tool result: the queued ones say so.
    assert final["result"].count("Task Succeeded") == BURST
    assert final["result"].count("It was queued for") >= BURST - CAP
    assert (
        "the max_concurrent_total cap of subagents running at once was reached" in (final["result"])
    )
    for i in range(BURST):
        assert (workspace / f"burst{i}.txt").read_text() == f"{i}\n"
    with Store.open(settings.state_dir / "warden.db") as store:
        records = store.list_tasks(run_id=final["run_id"])
        assert sorted(r.status for r in records) == ["completed"] * BURST
    # Never more than CAP sandboxes of tasks ran at once: intervals overlap at most CAP deep.
    spans: list[tuple[float, float]] = []
    for r in records:
        assert r.started_at is not None and r.ended_at is not None, r
        spans.append((r.started_at, r.ended_at))
    spans.sort()
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= CAP
    assert containers_of(final["run_id"]) == []


async def test_thirty_subagents_at_once_all_succeed(settings: Settings, workspace: Path) -> None:
    conversations = fan_out(MODERATE_LOAD, "load", [[text("{tool_results}")]])
    # No time limit: the figure depends on the machine (256 s while seven test suites
    # shared this 2-core machine, load average near 60, still with 0 failures).
    async with scripted_run(settings, workspace, conversations) as (run, _):
        result = await run.parent.run("load")
    failures = [r for r in result.tasks if r.status is not TaskStatus.COMPLETED]
    assert failures == [], [r.error for r in failures]
    assert len(result.tasks) == MODERATE_LOAD
    assert containers_of(run.session) == []
