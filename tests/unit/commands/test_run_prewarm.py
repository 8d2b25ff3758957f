"""`warden run` warms the bash type's sandbox only once the model SDK is in: a container
start takes CPU from the SDK's import, which the parent's first model call waits for."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from orchestrator.commands.run import _prewarm_once_the_sdk_is_in

if TYPE_CHECKING:
    from orchestrator.runtime.session import Run


class Manager:
    def __init__(self, sdk: asyncio.Future[Any]) -> None:
        self.upstream = SimpleNamespace(sdk=lambda: sdk)
        self.warmed: list[str] = []

    def prewarm(self, *agent_types: str) -> None:
        self.warmed.extend(agent_types)


def run_of(manager: Manager) -> Run:
    return cast("Run", SimpleNamespace(manager=manager))


async def test_the_bash_sandbox_is_warmed_only_once_the_sdk_is_in() -> None:
    sdk: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    manager = Manager(sdk)
    later = asyncio.create_task(_prewarm_once_the_sdk_is_in(run_of(manager), "bash"))
    for _ in range(20):  # the task gets every chance to run: it must still wait
        await asyncio.sleep(0)
    assert manager.warmed == []
    sdk.set_result(object())
    await later
    assert manager.warmed == ["bash"]


async def test_an_sdk_that_failed_warms_nothing_and_raises_nothing() -> None:
    sdk: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    sdk.set_exception(ImportError("no anthropic"))
    manager = Manager(sdk)
    await _prewarm_once_the_sdk_is_in(run_of(manager), "bash")
    assert manager.warmed == []
