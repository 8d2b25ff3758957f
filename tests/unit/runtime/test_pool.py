"""The warm pool is sized by demand (fake backend, no Docker): it keeps its minimum
ready, grows after a burst finds it empty (up to its cap), removes sandboxes left
idle past the idle timeout down to its minimum, never reserves more memory than
its budget across images, names a key that needs an image resolved on a worker
thread, and leaves no container behind when it closes."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator import labels
from orchestrator.backend.contract import ResourceLimits, SandboxSpec
from orchestrator.backend.fake import FakeBackend
from orchestrator.config import PoolConfig, Settings
from orchestrator.runtime.pool import PoolKey, WarmPool

MIB = 1024**2
SESSION = "test-pool"


def key_for(image: str, memory_mib: int = 512) -> PoolKey:
    return (image, ResourceLimits(memory_bytes=memory_mib * MIB).to_json())


def factory_for(key: PoolKey) -> Callable[[Path], SandboxSpec]:
    def spec(socket_dir: Path) -> SandboxSpec:
        return SandboxSpec(
            image=key[0],
            command=["sleep", "3600"],
            limits=ResourceLimits.from_json(key[1]),
            warden_labels=labels.warden_labels(SESSION, warm="1"),
        )

    return spec


class Pool:
    def __init__(self, config: PoolConfig) -> None:
        self.backend = FakeBackend()
        self.root = Path(tempfile.mkdtemp(prefix="wp-"))
        self.dirs = 0
        self.pool = WarmPool(
            backend=self.backend,
            config=config,
            blocking=asyncio.to_thread,
            new_socket_dir=self._new_dir,
        )

    def _new_dir(self) -> Path:
        self.dirs += 1
        path = self.root / str(self.dirs)
        path.mkdir()
        return path

    def live(self) -> int:
        return len(self.backend.list({labels.SESSION: SESSION}))

    async def settle(self) -> None:
        """Until no sandbox is starting (fills run in threads)."""
        for _ in range(500):
            if self.pool.starting_count() == 0:
                await asyncio.sleep(0.01)  # removals scheduled by the last fill
                return
            await asyncio.sleep(0.01)
        raise AssertionError("warm sandboxes never finished starting")

    async def burst(self, key: PoolKey, n: int) -> list[Any]:
        """`n` tasks arrive at once: each takes one (or none) and asks for a refill."""
        taken = []
        for _ in range(n):
            taken.append(self.pool.take(key))
            self.pool.refill(key, factory_for(key))
        return taken


@pytest.fixture
async def make_pool() -> AsyncIterator[Callable[..., Pool]]:
    made: list[Pool] = []

    def make(**config: Any) -> Pool:
        pool = Pool(PoolConfig(**config))
        made.append(pool)
        return pool

    yield make
    for pool in made:
        await pool.pool.close()
        assert pool.live() == 0, "the pool left containers behind"
        shutil.rmtree(pool.root, ignore_errors=True)


async def test_the_minimum_is_kept_ready_and_a_burst_grows_the_pool_up_to_its_cap(
    make_pool: Callable[..., Pool],
) -> None:
    p = make_pool(min_ready=1, max_ready=4, idle_s=60)
    key = key_for("img")
    p.pool.refill(key, factory_for(key))
    await p.settle()
    assert p.pool.ready_count() == 1 and p.pool.target(key) == 1
    taken = await p.burst(key, 3)  # one warm, two cold: the pool grows by the misses
    assert taken[0] is not None and taken[1:] == [None, None]
    assert p.pool.target(key) == 3
    await p.settle()
    assert p.pool.ready_count() == 3
    taken += await p.burst(key, 3)  # the same burst again: all warm
    assert all(t is not None for t in taken[3:])
    await p.settle()
    taken += await p.burst(key, 6)  # a bigger burst: capped at max_ready
    assert sum(t is not None for t in taken[6:]) == 3
    await p.settle()
    assert p.pool.target(key) == 4 and p.pool.ready_count() == 4
    for warm in taken:
        if warm is not None:
            await asyncio.to_thread(p.backend.remove, warm.container_id)


async def test_a_key_is_resolved_on_a_worker_thread_and_then_warmed(
    make_pool: Callable[..., Pool],
) -> None:
    p = make_pool(min_ready=1, max_ready=1, idle_s=60)
    key = key_for("img")
    resolved_on: list[int] = []

    def resolve() -> PoolKey:
        resolved_on.append(threading.get_ident())
        return key

    p.pool.refill_when_resolved(resolve, factory_for(key))
    for _ in range(500):
        if p.pool.ready_count():
            break
        await asyncio.sleep(0.01)
    warm = p.pool.take(key)
    assert warm is not None
    assert resolved_on and threading.get_ident() not in resolved_on
    await asyncio.to_thread(p.backend.remove, warm.container_id)


async def test_idle_sandboxes_above_the_minimum_are_removed(
    make_pool: Callable[..., Pool],
) -> None:
    p = make_pool(min_ready=1, max_ready=5, idle_s=0.3)
    key = key_for("img")
    taken = await p.burst(key, 4)
    await p.settle()
    assert p.pool.ready_count() == 4 and p.live() == 4
    await asyncio.sleep(0.6)
    await p.settle()
    assert p.pool.ready_count() == 1 and p.pool.target(key) == 1
    assert p.live() == 1  # the idle ones' containers are gone, not just forgotten
    assert all(t is None for t in taken)


async def test_the_memory_budget_caps_warm_sandboxes_across_images(
    make_pool: Callable[..., Pool],
) -> None:
    # 1.5 GiB: three 512 MiB sandboxes, or one 1 GiB and one 512 MiB.
    p = make_pool(min_ready=1, max_ready=8, idle_s=60, memory_budget_bytes=1536 * MIB)
    small, big = key_for("small", 512), key_for("big", 1024)
    await p.burst(small, 6)
    p.pool.refill(big, factory_for(big))
    await p.settle()
    assert p.pool.reserved_bytes() <= 1536 * MIB
    assert p.pool.ready_count() == 3 and p.pool.target(small) > 3  # it wanted more
    assert p.pool.take(big) is None  # no room for a 1 GiB one
    warm = p.pool.take(small)  # a task takes one: its memory is the task's now
    assert warm is not None
    p.pool.refill(big, factory_for(big))
    await p.settle()
    assert p.pool.reserved_bytes() <= 1536 * MIB
    await asyncio.to_thread(p.backend.remove, warm.container_id)


async def test_a_fixed_size_or_an_empty_budget_switches_growth_off(
    make_pool: Callable[..., Pool],
) -> None:
    off = make_pool(min_ready=1, max_ready=8, memory_budget_bytes=0)
    key = key_for("img")
    assert await off.burst(key, 3) == [None, None, None]
    await off.settle()
    assert off.live() == 0 and off.pool.target(key) == 0
    fixed = make_pool(min_ready=2, max_ready=2)
    await fixed.burst(key, 5)
    await fixed.settle()
    assert fixed.pool.ready_count() == 2 and fixed.pool.target(key) == 2
    # Switched off later (a benchmark's burst): what is ready is served, nothing refills.
    fixed.pool.reconfigure(PoolConfig(min_ready=0, max_ready=0))
    taken = await fixed.burst(key, 3)
    await fixed.settle()
    assert [t is not None for t in taken] == [True, True, False]
    assert fixed.pool.ready_count() == 0 and fixed.pool.target(key) == 0
    for warm in taken:
        if warm is not None:
            await asyncio.to_thread(fixed.backend.remove, warm.container_id)


def test_pool_settings_come_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "WARDEN_WARM_POOL_MIN": "0",
            "WARDEN_WARM_POOL_MAX": "3",
            "WARDEN_WARM_POOL_IDLE_S": "12.5",
            "WARDEN_WARM_POOL_MEMORY": "2g",
        }
    )
    config = settings.pool_config()
    assert config == PoolConfig(
        min_ready=0, max_ready=3, idle_s=12.5, memory_budget_bytes=2 * 1024**3
    )
    assert config.most_at(512 * MIB) == 4
    assert Settings.from_env({}).pool_config() == PoolConfig()
