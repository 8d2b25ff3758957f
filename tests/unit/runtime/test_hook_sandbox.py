"""The hook-sandbox pool is sized by demand and stays one sandbox per call (fake
backend, no Docker; a host thread plays each container's shim): calls that outrun
a full pool raise the number kept waiting, up to its cap, started together; used
sandboxes are removed and replaced once calls pause, not between the calls of a
burst (a call that finds none started starts one at once); after the idle time
without a call it falls back to its resting size and removes the extras; whatever
the size, every call is served by a container of its own that is removed after it. (The isolation itself is proven against the real engine in
tests/integration/test_hook_sandbox.py.)"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import shutil
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from orchestrator import labels
from orchestrator.backend.contract import Mount, SandboxSpec
from orchestrator.backend.fake import FakeBackend
from orchestrator.runtime import hook_sandbox
from orchestrator.runtime.hook_sandbox import HOOK_SOCKET_DIR, HOOK_SOCKET_NAME, HookSandboxPool

SESSION = "test-hook-pool"


class ShimBackend(FakeBackend):
    """A fake engine whose every started container connects to its hook socket at
    once, as the real shim does, and answers its one request with its own id."""

    def __init__(self) -> None:
        super().__init__()
        self.removed: list[str] = []
        self.shims: list[threading.Thread] = []
        self.gate = threading.Event()
        """Cleared: containers start but their shims wait (a slow engine)."""
        self.gate.set()

    def start(self, spec: SandboxSpec) -> str:
        container_id = super().start(spec)
        source = next(m.source for m in spec.mounts if m.target == HOOK_SOCKET_DIR)
        shim = threading.Thread(target=self._shim, args=(source, container_id), daemon=True)
        self.shims.append(shim)
        shim.start()
        return container_id

    def remove(self, container_id: str) -> None:
        self.removed.append(container_id)
        super().remove(container_id)

    def live(self) -> set[str]:
        return {c.id for c in self.list({labels.SESSION: SESSION})} - set(self.removed)

    def _shim(self, socket_dir: Path, container_id: str) -> None:
        self.gate.wait()
        with socket.socket(socket.AF_UNIX) as conn:
            try:
                conn.connect(str(socket_dir / HOOK_SOCKET_NAME))
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                json.loads(data)
            except (OSError, ValueError):
                return  # removed unused (the pool closed or shrank): no request came
            reply = {"exit": 0, "out": base64.b64encode(container_id.encode()).decode(),
                     "err": "", "out_cut": False, "err_cut": False}  # fmt: skip
            conn.sendall(json.dumps(reply).encode())


@pytest.fixture
async def pool() -> AsyncIterator[HookSandboxPool]:
    backend = ShimBackend()
    root = Path(tempfile.mkdtemp(prefix="hookpool-"))

    def spec_for(socket_dir: Path) -> SandboxSpec:
        return SandboxSpec(
            image="agent",
            command=["shim"],
            mounts=[Mount(source=socket_dir, target=HOOK_SOCKET_DIR, read_only=True)],
            warden_labels=labels.warden_labels(SESSION, hook="1"),
        )

    made = iter(range(10_000))
    pool = HookSandboxPool(
        backend=backend,
        spec_for=spec_for,
        make_dir=lambda: Path(tempfile.mkdtemp(prefix=f"d{next(made)}-", dir=root)),
        remove_dir=lambda d: shutil.rmtree(d, ignore_errors=True),
        ready=2,
        most=5,
        idle_s=3600,
    )
    try:
        yield pool
    finally:
        await pool.close()
        # Each shim ends once the host has closed its end (or refused it): the loop
        # runs until then, so no connection is left for the collector to find open.
        await until(lambda: not any(shim.is_alive() for shim in backend.shims))
        shutil.rmtree(root, ignore_errors=True)


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def backend_of(pool: HookSandboxPool) -> ShimBackend:
    assert isinstance(pool.backend, ShimBackend)
    return pool.backend


async def call(pool: HookSandboxPool) -> str:
    ran = await pool.run("true", b"{}", 30, cwd="/workspace", output_limit=4096)
    assert ran.error is None and ran.exit_code == 0, ran
    return ran.stdout[0].decode()


def started_all(pool: HookSandboxPool, count: int) -> Callable[[], bool]:
    return lambda: len(pool._waiting) == count and all(t.done() for t in pool._waiting)


async def test_calls_that_outrun_the_pool_grow_it_up_to_its_cap(pool: HookSandboxPool) -> None:
    backend = backend_of(pool)
    pool.warm()
    await until(started_all(pool, 2))
    backend.gate.clear()  # from now on the engine is slow: every new shim waits
    # Two calls find the two ready; each further one finds none and grows the pool.
    calls = [asyncio.create_task(call(pool)) for _ in range(7)]
    await until(lambda: pool.target == 5)
    backend.gate.set()
    served = await asyncio.gather(*calls)
    assert pool.target == 5  # never past `most`
    assert len(set(served)) == 7  # one container per call
    await until(lambda: set(served) <= set(backend.removed))  # each removed after its call
    await until(started_all(pool, 5))  # refilled to the grown size, together
    assert not backend.live() & set(served)


async def grown_by_a_burst_of_four(pool: HookSandboxPool) -> set[str]:
    """The pool at rest (2 started), then four calls while the engine is slow: it grows
    to 4 and refills to that; the containers that served the four calls."""
    backend = backend_of(pool)
    pool.warm()
    await until(started_all(pool, 2))
    backend.gate.clear()
    first = await_all([asyncio.create_task(call(pool)) for _ in range(4)])
    await until(lambda: pool.target == 4)
    backend.gate.set()
    served = set(await first)
    await until(started_all(pool, 4))
    return served


async def test_the_next_burst_of_the_same_size_finds_every_sandbox_started(
    pool: HookSandboxPool,
) -> None:
    earlier = await grown_by_a_burst_of_four(pool)
    # The next model turn's four calls: none finds the pool short (a miss would grow
    # it to 5), and each is served by a new container.
    served = await asyncio.gather(*(call(pool) for _ in range(4)))
    assert pool.target == 4
    assert len(set(served)) == 4 and not set(served) & earlier


async def test_the_pool_falls_back_to_its_resting_size_when_calls_stop(
    pool: HookSandboxPool,
) -> None:
    backend = backend_of(pool)
    earlier = await grown_by_a_burst_of_four(pool)
    await until(lambda: len(backend.live()) == 4)  # the used ones removed
    pool.idle_s = 0.05
    earlier.add(await call(pool))  # the last call; the idle clock runs from here
    await until(lambda: pool.target == 2 and len(backend.live()) == 2)
    await until(started_all(pool, 2))
    # At rest again, a call is still served at once, by a new container.
    assert await call(pool) not in earlier


async def await_all(tasks: list[asyncio.Task[str]]) -> list[str]:
    return list(await asyncio.gather(*tasks))


async def test_refills_wait_until_calls_pause_but_a_call_that_finds_none_does_not(
    pool: HookSandboxPool,
) -> None:
    backend = backend_of(pool)
    pool.settle_s = 3600  # calls never pause in this test
    pool.warm()
    await until(started_all(pool, 2))
    served = [await call(pool), await call(pool)]
    assert len(backend.started) == 2 and backend.removed == []  # nothing between calls
    served.append(await call(pool))  # none left: one starts at once (and the pool grows)
    assert len(set(served)) == 3 and pool.target == 3
    assert backend.removed == []
    await pool.close()
    await until(lambda: set(served) <= set(backend.removed))  # removed when the run ends


async def test_out_of_descriptors_pauses_accepting_instead_of_spinning(
    pool: HookSandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection waits while the process has no descriptor left for it: the
    pool tries again now and then instead of running the loop hot, and takes the
    connection once a descriptor is free."""
    backend = backend_of(pool)
    backend.gate.clear()  # the shims wait: this test makes the one connection
    pool.warm()
    await until(started_all(pool, 2))
    warm = pool._waiting[0].result()
    failures: list[str] = []
    monkeypatch.setattr(
        hook_sandbox.log, "debug", lambda text, *args: failures.append(text % args)
    )
    client = socket.socket(socket.AF_UNIX)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        client.connect(str(warm.socket_dir / HOOK_SOCKET_NAME))
        lowest_free = os.dup(0)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # none left
        try:
            await asyncio.sleep(0.3)  # a loop that spun would try thousands of times
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert failures and all("Too many open files" in f for f in failures), failures
        assert len(failures) < 20, len(failures)
        await until(warm.connected.done)
    finally:
        client.close()
        backend.gate.set()
