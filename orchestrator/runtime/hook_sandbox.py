"""The run's hook sandboxes: where every hook not marked trusted runs (the
`permissions.hooks.HookSandbox` the run gives its permission engines).

A hook sandbox is what a subagent's sandbox is: no network, no capabilities, a
read-only root, resource limits, the workspace at `/workspace` with the run's
protected paths read-only (its spec comes from the run's own parts: backend,
agent image, workspace guard, sandbox identity; `hook_sandbox_pool`), and
nothing else from the host (no key, no home, no host environment). Each one
serves exactly one hook call and is removed after it: nothing a hook leaves
behind (a process, a file in `/tmp`) reaches the next call.

Kept fast by a warm pool: `HOOK_POOL_READY` containers are started ahead of
time. When calls come faster than the pool refills (a model turn with several
tool calls), each call that finds none started raises that number by one (as
`runtime.pool` does for subagents), up to `HOOK_POOL_MOST`, the missing ones
started together; `HOOK_POOL_IDLE_S` after the last call it falls back to
`HOOK_POOL_READY`, removing the extras. Each runs `SHIM` (stdlib Python,
`-I -S`), which has already connected to a Unix socket the host listens on, in a
directory only that container mounts, and waits (the host accepts that one
connection on its event loop and stops listening). A call takes a ready one,
sends the command, its working directory and its stdin as one JSON document,
and reads back the exit code and the output (each stream cut at the caller's
limit, the cut announced); replacements start once calls pause. If the
orchestrator dies, the connection drops and the shim exits; the run's reaper
removes what is left (every container carries the run's
session label). `bench/bench_hooks.py` measures what this adds to a tool call.

This module owns the pool and the sandboxes' spec; what one call sends and reads
back (the shim and its reply) is `hook_shim`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import labels
from orchestrator.backend.contract import DiskLimits, Mount, ResourceLimits, SandboxSpec
from orchestrator.broker import SandboxIdentity, groups_for, holds_group, make_socket_dir
from orchestrator.errors import WardenError
from orchestrator.images.sealing import sealed_program
from orchestrator.lifecycle import socket_dirs
from orchestrator.permissions.hooks import SandboxedHookRun
from orchestrator.permissions.hooks.trust import sandboxed_environment
from orchestrator.runtime.hook_shim import (
    SHIM,
    SHIM_WAIT_S,
    encode_request,
    read_reply,
    reply_most,
)

if TYPE_CHECKING:
    from orchestrator.backend.contract import ContainerBackend
    from orchestrator.workspace import WorkspaceGuard

log = logging.getLogger(__name__)

HOOK_SANDBOX_ENV = sandboxed_environment()
"""A sandboxed hook's environment (nothing from the host; the shim gives the hook
exactly this, whatever the image sets: `permissions.hooks.trust`)."""
HOOK_IMAGE = "agent"
"""The image sandboxed hooks run in (Python, git, coreutils)."""
HOOK_SOCKET_DIR = "/run/warden-hook"
"""Where a hook sandbox sees its own socket directory (read-only)."""
HOOK_SOCKET_NAME = "hook.sock"
HOOK_SOCKET_BACKLOG = 4
"""Connections the kernel queues on a hook socket before they are accepted (one is
the shim's; any other is refused when it is accepted)."""
HOOK_POOL_READY = 2
"""Hook sandboxes kept started and waiting (two: a tool call may match two hooks)."""
HOOK_POOL_MOST = 6
"""The most kept waiting while calls come faster than the pool refills (each waiting
sandbox holds about 9 MiB)."""
HOOK_SETTLE_S = 0.15
"""Refills and removals wait until calls have paused this long (a model turn's tool
calls come closer together than this; model turns are seconds apart)."""
HOOK_POOL_IDLE_S = 60.0
"""Without a hook call for this long, the pool shrinks back to `HOOK_POOL_READY`."""
HOOK_SANDBOX_MAX_AGE_S = 3000.0
"""A waiting sandbox older than this is replaced, not used (its shim gives up at
`SHIM_WAIT_S`)."""
ACCEPT_RETRY_S = 0.1
"""Pause before accepting again after an accept failed for want of resources."""


def shim_command(python: str = "python3") -> list[str]:
    """The command of a waiting hook sandbox: the runner's fallocate filter
    (`sandbox_tools/seal.py`, standard library only, read as text: `-S` leaves
    sandbox_tools unimportable there) installed first, then `SHIM`."""
    program = sealed_program(f"refuse_fallocate()\n{SHIM}")
    return [
        python, "-I", "-S", "-c", program,
        f"{HOOK_SOCKET_DIR}/{HOOK_SOCKET_NAME}", str(SHIM_WAIT_S),
    ]  # fmt: skip


@dataclass
class _Warm:
    """One started hook sandbox and the host end of its socket."""

    socket_dir: Path
    listener: socket.socket
    connected: asyncio.Future[socket.socket]
    """The shim's connection, once it came (accepted on the loop, by `_accept`)."""
    started: float
    container_id: str = ""


@dataclass
class HookSandboxPool:
    """Hook sandboxes of one run, started ahead of time, each used once.

    `spec_for(socket_dir)` is the run's spec of a hook sandbox whose socket
    directory is `socket_dir`; `make_dir` / `remove_dir` make and remove such a
    directory (reachable by the sandbox's group only)."""

    backend: ContainerBackend
    spec_for: Callable[[Path], SandboxSpec]
    make_dir: Callable[[], Path]
    remove_dir: Callable[[Path], object]
    ready: int = HOOK_POOL_READY
    """How many are kept waiting while calls come no faster than the pool refills."""
    most: int = HOOK_POOL_MOST
    """How many may be kept waiting after calls came faster (never fewer than `ready`)."""
    idle_s: float = HOOK_POOL_IDLE_S
    """How long without a call before the pool shrinks back to `ready`."""
    settle_s: float = HOOK_SETTLE_S
    """How long calls must pause before used sandboxes are removed and replaced."""
    _target: int = field(default=0, repr=False)
    _waiting: list[asyncio.Task[_Warm]] = field(default_factory=list, repr=False)
    _closed: bool = field(default=False, repr=False)
    _cleanup: set[asyncio.Task[None]] = field(default_factory=set, repr=False)
    _shrink: asyncio.TimerHandle | None = field(default=None, repr=False)
    _settle: asyncio.TimerHandle | None = field(default=None, repr=False)
    _used: list[_Warm] = field(default_factory=list, repr=False)

    @property
    def target(self) -> int:
        """How many sandboxes the pool keeps started or starting now."""
        return max(self.ready, self._target)

    def warm(self) -> None:
        """Start sandboxes, all at once, until `target` are started or starting."""
        if self._closed:
            return
        while len(self._waiting) < self.target:
            task = asyncio.create_task(self._start_one(), name="hook-sandbox")
            task.add_done_callback(self._trim)
            self._waiting.append(task)

    async def run(
        self, command: str, stdin: bytes, timeout_s: float, *, cwd: str, output_limit: int
    ) -> SandboxedHookRun:
        """Run `command` with `sh -c` in a fresh sandbox; never raises for a failing hook."""
        started = time.monotonic()
        if self._closed:
            return SandboxedHookRun(error="the run is ending; no hook sandbox is left")
        self._drop_stale()
        self._idle_after_this_call()
        if not any(_usable(t) for t in self._waiting):
            # Calls come faster than the pool refills: keep one more waiting from now
            # on, and start what is missing now (this call waits for one of them).
            self._target = min(max(self.most, self.ready), self.target + 1)
            self.warm()
        pending = self._take()
        try:
            warm = await pending
        except (WardenError, OSError) as exc:
            self.warm()
            return SandboxedHookRun(
                error=f"could not start its sandbox: {exc}", duration_s=time.monotonic() - started
            )
        ran: SandboxedHookRun | None = None
        try:
            ran = await self._call(warm, command, stdin, timeout_s, cwd, output_limit, started)
            return ran
        finally:
            # A shim that answered has ended, and its container with it: removing it
            # can wait. Refills and removals run once calls pause (`HOOK_SETTLE_S`),
            # not between the calls of a burst: engine work takes CPU the next call
            # would otherwise wait for. Any other end is removed (killed) at once.
            self._dispose(warm, later=ran is not None and ran.error is None)
            self._settle_soon()

    async def close(self) -> None:
        """Stop every waiting sandbox and remove its directory (idempotent)."""
        self._closed = True
        for timer in (self._shrink, self._settle):
            if timer is not None:
                timer.cancel()
        used, self._used = self._used, []
        for warm in used:
            self._remove_later(warm)
        waiting, self._waiting = self._waiting, []
        # A start under way is finished, not cancelled: a cancelled one would leave
        # its container running without the pool knowing its id.
        for task in waiting:
            with contextlib.suppress(WardenError, OSError):
                self._dispose(await task)
        if self._cleanup:
            await asyncio.gather(*self._cleanup, return_exceptions=True)

    # -- inside ----------------------------------------------------------------

    def _take(self) -> asyncio.Task[_Warm]:
        ready = [t for t in self._waiting if _usable(t)]
        chosen = ready[0] if ready else self._waiting[0]
        self._waiting.remove(chosen)
        return chosen

    def _idle_after_this_call(self) -> None:
        """(Re)start the idle clock: `idle_s` after the last call, shrink to `ready`."""
        if self._shrink is not None:
            self._shrink.cancel()
        self._shrink = asyncio.get_running_loop().call_later(self.idle_s, self._shrink_to_ready)

    def _shrink_to_ready(self) -> None:
        """Fall back to `ready` waiting sandboxes, removing the extras."""
        self._shrink = None
        self._target = 0
        self._trim()

    def _trim(self, _done: object = None) -> None:
        """Remove started sandboxes beyond `target`, oldest first (one still starting
        is trimmed when its start ends: cancelling a start could leave a container
        the pool no longer knows)."""
        extra = len(self._waiting) - self.target
        for task in [t for t in self._waiting if _usable(t)][: max(extra, 0)]:
            self._waiting.remove(task)
            self._dispose(task.result())

    def _drop_stale(self) -> None:
        now = time.monotonic()
        for task in list(self._waiting):
            if not task.done():
                continue
            if task.cancelled() or task.exception() is not None:
                self._waiting.remove(task)
            elif now - task.result().started > HOOK_SANDBOX_MAX_AGE_S:
                self._waiting.remove(task)
                self._dispose(task.result())

    async def _start_one(self) -> _Warm:
        loop = asyncio.get_running_loop()
        socket_dir = await asyncio.to_thread(self.make_dir)
        path = socket_dir / HOOK_SOCKET_NAME
        listener = socket.socket(socket.AF_UNIX)
        try:
            listener.bind(str(path))
            # As for the broker: the directory's group is the sandbox's; only it and we.
            os.chown(path, -1, socket_dir.stat().st_gid)
            os.chmod(path, 0o660)
            listener.listen(HOOK_SOCKET_BACKLOG)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            await asyncio.to_thread(self.remove_dir, socket_dir)
            raise
        warm = _Warm(socket_dir, listener, loop.create_future(), time.monotonic())
        # Accepted in a reader callback on the loop, so a connection is always either
        # handed to `connected` or closed at once, whenever the sandbox is disposed.
        loop.add_reader(listener.fileno(), self._accept, warm)
        try:
            spec = await asyncio.to_thread(self.spec_for, socket_dir)
            warm.container_id = await asyncio.to_thread(self.backend.start, spec)
        except BaseException:
            self._dispose(warm)
            raise
        return warm

    def _accept(self, warm: _Warm) -> None:
        try:
            conn, _ = warm.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            # Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS): the connection
            # stays queued, so the reader would fire again at once and spin the loop.
            # Stop reading and try again after a pause.
            log.debug("hook sandbox accept failed: %s; trying again shortly", exc)
            fd = warm.listener.fileno()
            loop = asyncio.get_running_loop()
            loop.remove_reader(fd)
            loop.call_later(ACCEPT_RETRY_S, self._accept_again, warm, fd)
            return
        if warm.connected.done() or not holds_group(conn, warm.socket_dir):
            conn.close()  # one sandbox, one connection: its own
            return
        conn.setblocking(False)
        warm.connected.set_result(conn)
        _stop_listening(warm)  # its one connection came: nothing else may connect

    def _accept_again(self, warm: _Warm, fd: int) -> None:
        if warm.listener.fileno() == fd and not warm.connected.done():  # not disposed
            asyncio.get_running_loop().add_reader(fd, self._accept, warm)

    async def _call(
        self,
        warm: _Warm,
        command: str,
        stdin: bytes,
        timeout_s: float,
        cwd: str,
        limit: int,
        started: float,
    ) -> SandboxedHookRun:
        request = encode_request(command, cwd, HOOK_SANDBOX_ENV, stdin, limit)
        most = reply_most(limit)

        async def talk() -> bytes:
            loop = asyncio.get_running_loop()
            conn = await asyncio.shield(warm.connected)
            await loop.sock_sendall(conn, request)
            conn.shutdown(socket.SHUT_WR)
            kept = bytearray()
            while len(kept) <= most and (chunk := await loop.sock_recv(conn, 65536)):
                kept += chunk  # the shim sends once and closes
            return bytes(kept)

        try:
            raw = await asyncio.wait_for(talk(), timeout_s)
        except TimeoutError:
            return SandboxedHookRun(
                error=f"timed out after {timeout_s:g}s in its sandbox; killed (counts as an "
                "error, not an allow)",
                duration_s=time.monotonic() - started,
            )
        except OSError as exc:
            raw = b""
            log.debug("hook sandbox connection failed: %s", exc)
        took = time.monotonic() - started
        return read_reply(raw, most, took)

    def _settle_soon(self) -> None:
        """`settle_s` after the last call, refill and remove what calls used."""
        if self._settle is not None:
            self._settle.cancel()
        self._settle = asyncio.get_running_loop().call_later(self.settle_s, self._settled)

    def _settled(self) -> None:
        self._settle = None
        used, self._used = self._used, []
        for warm in used:
            self._remove_later(warm)
        self.warm()

    def _dispose(self, warm: _Warm, *, later: bool = False) -> None:
        """Close the host end now; remove the container and directory in the
        background, now or (`later`) once calls pause."""
        _stop_listening(warm)
        if warm.connected.done() and not warm.connected.cancelled():
            warm.connected.result().close()
        else:
            warm.connected.cancel()
        if later and not self._closed:
            self._used.append(warm)
        else:
            self._remove_later(warm)

    def _remove_later(self, warm: _Warm) -> None:
        """Remove the container and directory in a background task."""

        async def remove() -> None:
            if warm.container_id:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.backend.remove, warm.container_id)
            await asyncio.to_thread(self.remove_dir, warm.socket_dir)

        task = asyncio.get_running_loop().create_task(remove(), name="hook-sandbox-remove")
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)


def _stop_listening(warm: _Warm) -> None:
    """Stop accepting on `warm`'s socket and close it (idempotent)."""
    if warm.listener.fileno() != -1:
        asyncio.get_running_loop().remove_reader(warm.listener.fileno())
        warm.listener.close()


def _usable(task: asyncio.Task[_Warm]) -> bool:
    """Whether `task` has started its sandbox (a call can have it without waiting)."""
    return task.done() and not task.cancelled() and task.exception() is None


def hook_sandbox_pool(
    *,
    backend: ContainerBackend,
    image_for: Callable[[str], str],
    workspace: Path,
    guard: WorkspaceGuard,
    identity: SandboxIdentity,
    disk: DiskLimits,
    session: str,
    run_id: str,
) -> HookSandboxPool:
    """The run's pool of hook sandboxes (nothing starts until `warm` or a first hook)."""

    def spec_for(socket_dir: Path) -> SandboxSpec:
        return SandboxSpec(
            image=image_for(HOOK_IMAGE),
            command=shim_command(),
            workspace=workspace,
            mounts=[
                Mount(source=socket_dir, target=HOOK_SOCKET_DIR, read_only=True),
                *guard.mounts(),
            ],
            env=dict(HOOK_SANDBOX_ENV),
            user=f"{identity.uid}:{identity.gid}",
            groups=groups_for(socket_dir),
            limits=ResourceLimits(disk=disk),
            warden_labels=labels.warden_labels(session, run=run_id, hook="1"),
        )

    return HookSandboxPool(
        backend=backend,
        spec_for=spec_for,
        make_dir=lambda: socket_dirs.mark(make_socket_dir(identity, socket_dirs.socket_root())),
        remove_dir=socket_dirs.remove,
    )
