"""The warm pool is sized by demand on the real engine: a burst of tasks that finds
it short grows it (real warm sandboxes, their runners waiting), never past its
memory budget, and sandboxes left idle past the idle timeout are removed from the
engine down to the pool's minimum; nothing is left when the run ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.config import PoolConfig, Settings
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import containers_of, convo, scripted_run, text, until

pytestmark = pytest.mark.integration

MIB = 1024**2
BURST = 4
IDLE_S = 3.0


def warm_containers(session: str) -> list[str]:
    """Running warm sandboxes of the session on the engine (not yet taken by a task)."""
    return [
        c.id
        for c in containers_of(session)
        if c.labels.get("warden.warm") == "1" and c.status == "running"
    ]


async def test_a_burst_grows_the_pool_within_its_memory_budget_and_idle_ones_go(
    settings: Settings, workspace: Path
) -> None:
    script = [
        convo(f"b{i}", {"prompt_contains": f"BURST-{i}"}, [text("done")]) for i in range(BURST)
    ]
    # Room for two sandboxes at the default 512 MiB.
    pool = PoolConfig(min_ready=1, max_ready=BURST, idle_s=IDLE_S, memory_budget_bytes=1024 * MIB)
    config = TaskManagerConfig(warm_pool=pool)
    async with scripted_run(settings, workspace, script, config=config) as (run, _server):
        warm = run.manager.pool
        seen = {"ready": 0, "reserved": 0, "engine": 0, "target": 0}
        stop = asyncio.Event()

        async def watch() -> None:
            """The pool's peaks, sampled while the burst runs and after."""
            polls = 0
            while not stop.is_set():
                seen["ready"] = max(seen["ready"], warm.ready_count())
                seen["reserved"] = max(seen["reserved"], warm.reserved_bytes())
                for key in list(warm._slots):
                    seen["target"] = max(seen["target"], warm.target(key))
                if polls % 10 == 0:
                    on_engine = len(await asyncio.to_thread(warm_containers, run.session))
                    seen["engine"] = max(seen["engine"], on_engine)
                polls += 1
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        inputs = [
            TaskInput(description=f"b{i}", prompt=f"BURST-{i}", subagent_type="general-purpose")
            for i in range(BURST)
        ]
        results = await asyncio.gather(*(run.manager.run_task(t) for t in inputs))
        assert [r.status for r in results] == [TaskStatus.COMPLETED] * BURST
        (key,) = warm._slots
        # The burst found the pool short: it grew (by how much depends on how the
        # tasks interleaved with the sandboxes starting for them).
        assert seen["target"] >= 2
        # It filled up to what the memory budget holds: two, not more.
        await until(lambda: seen["ready"] == 2, 120, "two warm sandboxes ready")
        # Left idle, the extras are removed from the engine; the minimum stays.
        await until(lambda: warm.ready_count() == 1, IDLE_S + 60, "idle shrinking")
        await until(lambda: len(warm_containers(run.session)) == 1, 30, "idle removal")
        assert warm.target(key) == 1
        stop.set()
        await watcher
        assert seen["reserved"] <= pool.memory_budget_bytes and seen["engine"] <= 2
    assert containers_of(run.session) == []
