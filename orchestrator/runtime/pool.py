"""Warm sandboxes: containers started before they are needed.

Importing the anthropic SDK costs the in-container runner over a second of
CPU, which would dominate every subagent's start. A warm sandbox is a fully
hardened container, started with the workspace and its own (still empty)
socket directory mounted, whose runner has already done its imports and waits
on a hold socket (`Hold`) in that directory. A task takes one, puts its broker
on the directory, releases the hold, and the runner starts at once. If the
orchestrator dies, the kernel drops the hold connection and the runner exits by
itself instead of waiting out WARM_WAIT_S. A warm sandbox serves exactly one
task and is never reused; idle ones are removed with the run.

A warm sandbox's spec (and so its read-only workspace mounts) is built by the
factory when that sandbox starts, never ahead of time, so it gets the run's
protections as they are then (see `orchestrator.workspace.guard`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.backend.base import SandboxSpec
from orchestrator.errors import WardenError
from sandbox_tools import wire

log = logging.getLogger(__name__)

WARM_WAIT_S = 3600.0
"""How long a warm runner waits for a task before it exits by itself."""
WARM_MAX_AGE_S = WARM_WAIT_S - 60.0
"""Older warm sandboxes are not handed out (their runner may be about to give up)."""


class Hold:
    """The socket a warm runner waits on (`wire.WARM_HOLD_SOCKET`): `release()` tells
    it to start (the broker socket is ready), `dismiss()` to exit; if this process
    dies, the kernel drops the connection and the runner exits too. Nothing polls."""

    def __init__(self, socket_dir: Path) -> None:
        self.path = socket_dir / Path(wire.WARM_HOLD_SOCKET).name
        self._answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._server: asyncio.Server | None = None

    async def open(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        # Like the broker socket: the directory's group is the sandbox's, and only it
        # (and we) may connect.
        os.chown(self.path, -1, self.path.parent.stat().st_gid)
        os.chmod(self.path, 0o660)

    async def _serve(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await asyncio.shield(self._answer))
            await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.close()  # one runner, one answer

    def release(self) -> None:
        """Tell the runner to start; it may connect before or after this."""
        if not self._answer.done():
            self._answer.set_result(wire.WARM_GO)

    def dismiss(self) -> None:
        """Tell the runner to exit (a later connection is refused: it exits too)."""
        if not self._answer.done():
            self._answer.set_result(wire.WARM_BYE)
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


@dataclass
class WarmSandbox:
    container_id: str
    socket_dir: Path
    hold: Hold
    started: float = field(default_factory=time.monotonic)

    def release(self) -> None:
        """Start the runner: call once the task's broker listens in `socket_dir`."""
        self.hold.release()


PoolKey = tuple[str, str]
"""(image, resource limits as JSON): sandboxes are interchangeable only within a key
(mounts are not part of it: every sandbox of a run gets the same protections)."""

SpecFactory = Callable[[Path], SandboxSpec]


class WarmPool:
    """Keeps up to `size` warm sandboxes ready per key."""

    def __init__(
        self,
        *,
        backend: Any,
        size: int,
        blocking: Callable[..., Awaitable[Any]],
        new_socket_dir: Callable[[], Path],
    ) -> None:
        self.backend = backend
        self.size = size
        self._blocking = blocking
        self._new_socket_dir = new_socket_dir
        self._ready: dict[PoolKey, list[WarmSandbox]] = {}
        self._filling: dict[PoolKey, int] = {}
        self._fills: set[asyncio.Task[None]] = set()
        self._holds: list[Hold] = []
        self._closed = False

    def take(self, key: PoolKey) -> WarmSandbox | None:
        """A ready sandbox for this key, or None (the caller starts one cold)."""
        ready = self._ready.get(key, [])
        while ready:
            warm = ready.pop(0)
            if time.monotonic() - warm.started < WARM_MAX_AGE_S:
                return warm
            self._discard(warm)
        return None

    def refill(self, key: PoolKey, factory: SpecFactory) -> None:
        """Start enough sandboxes in the background to have `size` ready."""
        if self._closed or self.size <= 0:
            return
        missing = self.size - len(self._ready.get(key, [])) - self._filling.get(key, 0)
        for _ in range(max(0, missing)):
            self._filling[key] = self._filling.get(key, 0) + 1
            fill = asyncio.create_task(self._fill(key, factory))
            self._fills.add(fill)
            fill.add_done_callback(self._fills.discard)

    async def _fill(self, key: PoolKey, factory: SpecFactory) -> None:
        socket_dir = self._new_socket_dir()
        hold = Hold(socket_dir)
        self._holds.append(hold)
        try:
            await hold.open()  # before the container starts, so its runner finds it
            container_id = await self._blocking(self.backend.start, factory(socket_dir))
        except (WardenError, OSError) as exc:
            log.warning("could not start a warm sandbox (tasks will start cold): %s", exc)
            hold.dismiss()
            shutil.rmtree(socket_dir, ignore_errors=True)
            return
        finally:
            self._filling[key] -= 1
        warm = WarmSandbox(container_id, socket_dir, hold)
        if self._closed:
            self._discard(warm)
            return
        self._ready.setdefault(key, []).append(warm)

    def _discard(self, warm: WarmSandbox) -> None:
        warm.hold.dismiss()
        self._remove(warm)

    def _remove(self, warm: WarmSandbox) -> None:
        try:
            self.backend.remove(warm.container_id)
        except WardenError:
            log.exception("could not remove warm sandbox %s", warm.container_id[:12])
        shutil.rmtree(warm.socket_dir, ignore_errors=True)

    async def close(self) -> None:
        """Remove every idle sandbox; fills still under way remove theirs when done."""
        self._closed = True
        if self._fills:
            await asyncio.gather(*self._fills, return_exceptions=True)
        idle = [w for ready in self._ready.values() for w in ready]
        self._ready.clear()
        for warm in idle:
            warm.hold.dismiss()  # on the loop; the removal below runs in threads
        for hold in self._holds:
            hold.close()  # released ones whose runner never came for its answer
        await asyncio.gather(
            *(asyncio.to_thread(self._remove, w) for w in idle), return_exceptions=True
        )

    def ready_count(self) -> int:
        return sum(len(r) for r in self._ready.values())
