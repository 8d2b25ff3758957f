"""Warm sandboxes: containers started before they are needed.

Creating and starting a container, and the runner's interpreter start, are
most of a subagent's start. A warm sandbox is a fully
hardened container, started with the workspace and its own (still empty)
socket directory mounted, whose runner has already done its imports and waits
on a hold socket (`Hold`) in that directory. A task takes one, puts its broker
on the directory, releases the hold, and the runner starts at once. If the
orchestrator dies, the kernel drops the hold connection and the runner exits by
itself instead of waiting out WARM_WAIT_S. A warm sandbox serves exactly one
task and is never reused; idle ones are removed with the run.

The pool is sized by demand (`PoolConfig`): per key it keeps `min_ready`
sandboxes ready; a task that finds none ready while the pool holds (or is
starting) all it aims for, a burst, raises the key's target by one, up to
`max_ready`; a sandbox beyond `min_ready` that stays unused for `idle_s` is
removed and the target drops to what is left. Every warm sandbox
(ready or starting) reserves its memory limit, and the reservations never add
up to more than `memory_budget_bytes`: a refill that would cross it is not
started (the task starts cold instead). Removals run in worker threads, never
on the event loop.

A warm sandbox's spec (and so its read-only workspace mounts) is built by the
factory when that sandbox starts, never ahead of time, so it gets the run's
protections as they are then (see `orchestrator.workspace.guard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.backend.contract import ResourceLimits, SandboxSpec
from orchestrator.broker import holds_group
from orchestrator.config import PoolConfig
from orchestrator.errors import ConfigError, WardenError
from orchestrator.lifecycle import socket_dirs
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
        if not holds_group(writer.get_extra_info("socket"), self.path.parent):
            writer.close()  # another sandbox's process: not this runner
            return
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
        """Stop listening and unlink the socket (by path: no descriptor needed, so its
        directory can go even when the process is out of them)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        with contextlib.suppress(OSError):  # also bound by an open() that then failed
            self.path.unlink()


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


@dataclass
class _Slot:
    """One key's state: what is ready, what is starting, and how many it wants."""

    memory_bytes: int
    target: int
    ready: list[WarmSandbox] = field(default_factory=list)
    filling: int = 0
    factory: SpecFactory | None = None


class WarmPool:
    """Keeps warm sandboxes ready per key, as many as demand asks within `config`."""

    def __init__(
        self,
        *,
        backend: Any,
        config: PoolConfig,
        blocking: Callable[..., Awaitable[Any]],
        new_socket_dir: Callable[[], Path],
    ) -> None:
        self.backend = backend
        self.config = config
        self._blocking = blocking
        self._new_socket_dir = new_socket_dir
        self._slots: dict[PoolKey, _Slot] = {}
        self._work: set[asyncio.Task[None]] = set()
        self._holds: list[Hold] = []
        self._unremoved: list[Path] = []
        """Socket directories a removal could not take yet (out of descriptors): tried
        again when the pool closes."""
        self._over_budget_said = False
        self._closed = False

    # -- what tasks call --------------------------------------------------

    def take(self, key: PoolKey) -> WarmSandbox | None:
        """A ready sandbox for this key, or None (the caller starts one cold, and the
        key's target grows: the next burst of this size finds it warm)."""
        slot = self._slot(key)
        while slot.ready:
            warm = slot.ready.pop(0)
            if time.monotonic() - warm.started < WARM_MAX_AGE_S:
                return warm
            self._discard(warm)
        if self.config.enabled and len(slot.ready) + slot.filling >= slot.target:
            # Demand outran a full pool (not one still starting): grow it.
            slot.target = min(self.config.max_ready, slot.target + 1)
        log.debug("warm pool miss: target %d, %d starting", slot.target, slot.filling)
        return None

    def refill(self, key: PoolKey, factory: SpecFactory) -> None:
        """Start sandboxes in the background until the key has its target ready or
        starting, as far as the memory budget allows."""
        if self._closed or not self.config.enabled:
            return
        slot = self._slot(key)
        slot.factory = factory
        while slot.filling + len(slot.ready) < slot.target:
            if self.reserved_bytes() + slot.memory_bytes > self.config.memory_budget_bytes:
                self._say_over_budget(slot)
                return
            slot.filling += 1
            self._spawn(self._fill(key, slot, factory))

    def refill_when_resolved(self, resolve: Callable[[], PoolKey], factory: SpecFactory) -> None:
        """`refill` once `resolve` has named the key. Naming it resolves an image (an
        engine call, hashing the image's sources), so it runs on a worker thread while the
        loop goes on. A key that cannot be resolved warms nothing: its tasks start cold
        and raise the error themselves."""
        if self._closed or not self.config.enabled:
            return
        self._spawn(self._refill_when_resolved(resolve, factory))

    async def _refill_when_resolved(
        self, resolve: Callable[[], PoolKey], factory: SpecFactory
    ) -> None:
        try:
            key = await self._blocking(resolve)
        except (WardenError, OSError) as exc:
            log.warning("could not start a warm sandbox (tasks will start cold): %s", exc)
            return
        self.refill(key, factory)

    def reconfigure(self, config: PoolConfig) -> None:
        """New sizing from now on; each key's target is brought within it (sandboxes
        already ready stay until taken, idle or closed)."""
        self.config = config
        for slot in self._slots.values():
            slot.target = max(self._floor(), min(slot.target, config.max_ready))

    async def close(self) -> None:
        """Remove every idle sandbox; fills still under way remove theirs when done."""
        self._closed = True
        while self._work:
            await asyncio.gather(*list(self._work), return_exceptions=True)
        idle = [w for slot in self._slots.values() for w in slot.ready]
        for slot in self._slots.values():
            slot.ready.clear()
        for warm in idle:
            warm.hold.dismiss()  # on the loop; the removal below runs in threads
        for hold in self._holds:
            hold.close()  # released ones whose runner never came for its answer
        await asyncio.gather(
            *(asyncio.to_thread(self._remove, w) for w in idle), return_exceptions=True
        )
        left, self._unremoved = self._unremoved, []
        for socket_dir in left:
            await asyncio.to_thread(self._remove_dir, socket_dir)

    # -- what tests, benchmarks and doctor read ---------------------------

    def ready_count(self) -> int:
        return sum(len(slot.ready) for slot in self._slots.values())

    def starting_count(self) -> int:
        return sum(slot.filling for slot in self._slots.values())

    def target(self, key: PoolKey) -> int:
        return self._slot(key).target

    def reserved_bytes(self) -> int:
        """Memory limits of every warm sandbox, ready or starting."""
        return sum(
            (len(slot.ready) + slot.filling) * slot.memory_bytes for slot in self._slots.values()
        )

    # -- inside -----------------------------------------------------------

    def _slot(self, key: PoolKey) -> _Slot:
        slot = self._slots.get(key)
        if slot is None:
            slot = _Slot(memory_bytes=_memory_of(key), target=self._floor())
            self._slots[key] = slot
        return slot

    def _floor(self) -> int:
        return min(self.config.min_ready, self.config.max_ready) if self.config.enabled else 0

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def _fill(self, key: PoolKey, slot: _Slot, factory: SpecFactory) -> None:
        try:
            socket_dir = self._new_socket_dir()
        except (WardenError, OSError) as exc:  # it removes what it made before failing
            slot.filling -= 1
            log.warning("could not start a warm sandbox (tasks will start cold): %s", exc)
            return
        hold = Hold(socket_dir)
        self._holds.append(hold)
        try:
            await hold.open()  # before the container starts, so its runner finds it
            # The spec walks the workspace for the deny rules' mounts: off the loop.
            container_id = await self._blocking(lambda: self.backend.start(factory(socket_dir)))
        except (WardenError, OSError) as exc:
            log.warning("could not start a warm sandbox (tasks will start cold): %s", exc)
            self._abandon(hold, socket_dir)
            return
        except BaseException:  # cancelled: a container that still starts carries the
            self._abandon(hold, socket_dir)  # run's labels, and the run removes it
            raise
        finally:
            slot.filling -= 1
        warm = WarmSandbox(container_id, socket_dir, hold)
        if self._closed:
            hold.dismiss()
            await self._blocking(self._remove, warm)
            return
        slot.ready.append(warm)
        log.debug("warm sandbox %s ready (%d ready)", container_id[:12], len(slot.ready))
        asyncio.get_running_loop().call_later(
            self.config.idle_s, self._shrink_idle, key, warm.container_id
        )

    def _shrink_idle(self, key: PoolKey, container_id: str) -> None:
        """`container_id` has waited `idle_s`: if it is still unused and above the
        floor, remove it and lower the key's target."""
        slot = self._slots.get(key)
        if self._closed or slot is None:
            return
        warm = next((w for w in slot.ready if w.container_id == container_id), None)
        if warm is None or len(slot.ready) + slot.filling <= self._floor():
            return
        slot.ready.remove(warm)
        # Demand has dropped: aim for what is left (a target the budget kept out of
        # reach shrinks too).
        held = len(slot.ready) + slot.filling
        slot.target = max(self._floor(), min(slot.target - 1, held))
        log.debug("warm sandbox %s idle for %g s: removed", container_id[:12], self.config.idle_s)
        self._discard(warm)

    def _say_over_budget(self, slot: _Slot) -> None:
        if not self._over_budget_said:
            self._over_budget_said = True
            log.info(
                "warm pool at its memory budget (%d MiB reserved of %d MiB): further tasks "
                "start cold; raise WARDEN_WARM_POOL_MEMORY to keep more ready",
                self.reserved_bytes() // 1024**2,
                self.config.memory_budget_bytes // 1024**2,
            )

    def _discard(self, warm: WarmSandbox) -> None:
        """Dismiss its runner now, remove its container in a worker thread."""
        warm.hold.dismiss()
        self._spawn(self._blocking(self._remove, warm))

    def _abandon(self, hold: Hold, socket_dir: Path) -> None:
        """Undo a fill that started no sandbox: its hold socket and its directory."""
        hold.dismiss()
        self._remove_dir(socket_dir)

    def _remove(self, warm: WarmSandbox) -> None:
        try:
            self.backend.remove(warm.container_id)
        except WardenError:
            log.exception("could not remove warm sandbox %s", warm.container_id[:12])
        self._remove_dir(warm.socket_dir)

    def _remove_dir(self, socket_dir: Path) -> None:
        if not socket_dirs.remove(socket_dir):
            self._unremoved.append(socket_dir)  # close() tries again


def _memory_of(key: PoolKey) -> int:
    """The memory limit of a key's sandboxes (its limits JSON); the default if unreadable."""
    try:
        return ResourceLimits.from_json(key[1]).memory_bytes
    except ConfigError:
        return ResourceLimits().memory_bytes
