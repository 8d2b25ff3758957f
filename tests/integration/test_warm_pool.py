"""The warm pool is sized by demand on the real engine: a burst of tasks that finds
it short grows it (real warm sandboxes, their runners waiting), never past its
memory budget, and sandboxes left idle past the idle timeout are removed from the
engine down to the pool's minimum; nothing is left when the run ends, nor when a
warm sandbox cannot start."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
from pathlib import Path

import pytest
from docker import DockerClient

from orchestrator import labels as wl
from orchestrator.backend.contract import Mount, ResourceLimits, SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.broker import SandboxIdentity, make_socket_dir
from orchestrator.config import PoolConfig, Settings
from orchestrator.lifecycle import socket_dirs
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.pool import WarmPool
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from sandbox_tools import wire
from tests.conftest import UNPRIVILEGED
from tests.integration.harness import containers_of, convo, scripted_run, text, until
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    sandbox_image,
)

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


async def test_a_warm_sandbox_that_cannot_start_leaves_nothing_behind(
    settings: Settings,
    workspace: Path,
    docker_client: DockerClient,  # noqa: F811
    sandbox_image: str,  # noqa: F811
    test_session: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Out of descriptors (EMFILE), a warm sandbox cannot start: its socket directory
    (with the hold socket already listening in it), the directory's marker and any
    container are all removed, though listing a directory then takes a descriptor the
    process does not have."""
    backend = DockerBackend(
        docker_client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    identity = SandboxIdentity(uid=UNPRIVILEGED, gid=UNPRIVILEGED)
    made: list[Path] = []
    exhausted: list[int] = []
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)

    def new_socket_dir() -> Path:
        made.append(socket_dirs.mark(make_socket_dir(identity, socket_dirs.socket_root())))
        return made[-1]

    def exhausting_factory(socket_dir: Path) -> SandboxSpec:
        """The spec of a warm sandbox, built once no descriptor is left: from here the
        start, and the pool's clean-up after it, run as under descriptor exhaustion."""
        spec = SandboxSpec(
            image=sandbox_image,
            command=["sleep", "60"],
            workspace=workspace,
            mounts=[Mount(source=socket_dir, target=wire.BROKER_SOCKET_DIR, read_only=False)],
            warden_labels=wl.warden_labels(test_session, warm="1"),
        )
        lowest_free = os.dup(0)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, limits[1]))  # none left
        exhausted.append(lowest_free)
        return spec

    pool = WarmPool(
        backend=backend,
        config=PoolConfig(min_ready=1, max_ready=1),
        blocking=asyncio.to_thread,
        new_socket_dir=new_socket_dir,
    )
    key = ("bash", ResourceLimits().to_json())
    try:
        with caplog.at_level(logging.WARNING, logger="orchestrator.runtime.pool"):
            pool.refill(key, exhausting_factory)
            await until(lambda: pool.starting_count() == 0, 120, "the warm start to end")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    try:
        assert exhausted, "the factory never ran"
        assert pool.ready_count() == 0
        assert "Too many open files" in caplog.text, caplog.text
        (socket_dir,) = made
        # Removed while the process was still out of descriptors, not by the close.
        assert not socket_dir.exists() and not socket_dirs.marker_of(socket_dir).exists()
        assert containers_of(test_session) == []
    finally:
        await pool.close()
        backend.cleanup({wl.SESSION: test_session})
