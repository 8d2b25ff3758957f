"""`warden mcp`'s runs end whole: a stop signal that arrives while a session's run is
already closing (its client ended the session a moment before) lets that run finish
closing, so its result document is written, while a run still serving a session is
interrupted as Ctrl-C interrupts it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import RunConfig
from orchestrator.config import Settings
from orchestrator.mcp_server import runs as runs_module


class FakeRun:
    run_id = "run-x"

    def prewarm(self, *types: str) -> None:
        pass

    async def stop_all(self) -> list[str]:
        return []


async def test_a_signal_during_a_runs_close_lets_it_finish_and_interrupts_the_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    closing_started = asyncio.Event()
    release = asyncio.Event()
    ended: list[str] = []

    @contextlib.asynccontextmanager
    async def fake_open_session(config: RunConfig, **_: Any) -> AsyncIterator[FakeRun]:
        try:
            yield FakeRun()
        except asyncio.CancelledError:
            ended.append("interrupted")
            raise
        # The run's own close: stopping tasks, writing its result files.
        closing_started.set()
        await release.wait()
        ended.append("closed")

    monkeypatch.setattr(runs_module, "open_session", fake_open_session)
    runs = runs_module.SessionRuns(RunConfig(workspace=tmp_path), Settings())
    first, second = runs.claim(), runs.claim()
    await asyncio.wait_for(asyncio.gather(first.ready, second.ready), 10)
    first.end()  # its client deleted the session: the run is closing itself
    await asyncio.wait_for(closing_started.wait(), 10)

    stopping = asyncio.create_task(runs.close(stopping=True))  # then a SIGTERM
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(stopping, 10)

    assert sorted(ended) == ["closed", "interrupted"]
