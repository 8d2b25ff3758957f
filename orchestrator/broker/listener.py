"""The broker's Unix socket: who may connect, how many at once, and for how long.

- Access: every socket directory has a group of its own (`sandbox_group`: a gid
  picked at random from `SANDBOX_GROUPS`, in the directory's name), which only the
  one container that mounts it holds (as a supplementary group, `SandboxSpec.groups`).
  The directory is owned by the orchestrator with that group and mode 0750, the
  socket 0660: another sandbox of the same run (same uid and primary gid) cannot
  even open it. On every accept the peer's credentials are checked as well
  (`peer_refusal`: SO_PEERCRED for the uid, SO_PEERGROUPS for the groups): the
  sandbox's uid holding the directory's group, or the orchestrator's own uid when
  that is not the sandbox's; anyone else is closed and reported once.
- Connections: at most `MAX_CONNECTIONS_PER_SOCKET` at once per socket, and at
  most `ConnectionBudget.limit` over every socket of the run (half the process's
  open-file limit, so connections can never take the descriptors the store, the
  events file and the engine client need), except that every socket may always
  hold `RESERVED_CONNECTIONS_PER_SOCKET` (what a runner needs), so sandboxes that
  fill the run's budget cannot lock a neighbour out of its own broker. When a new one
  arrives at the cap, the oldest connection with no request in progress is
  closed to make room (a half-open flood cannot lock out real requests); only
  when every connection is busy is the new one closed. Either way it is
  counted and reported once.
- Time: a connection with no request in progress is closed after
  `HEADER_TIMEOUT_S` (a request's headers must arrive within it); a body must
  arrive within `BODY_TIMEOUT_S` (enforced where it is read, in the server).
- Accept errors (EMFILE and friends) back off instead of spinning, and are
  reported once per socket instead of as a traceback per attempt.

Own accept loop (not aiohttp's `UnixSite`) because the peer check, the cap and
the eviction must happen between `accept()` and the HTTP protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import random
import re
import socket
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

SOCKET_ROOT_PREFIX = "warden-sock-"
"""Socket directories live under the caller's socket root (short: Unix socket paths
are limited to 107 bytes)."""
DIR_MODE = 0o750
SOCKET_MODE = 0o660
MAX_CONNECTIONS_PER_SOCKET = 32
"""Open connections one sandbox may hold to its broker (its runner needs two or three)."""
HEADER_TIMEOUT_S = 10.0
"""An idle connection (no request in progress) is closed after this long."""
BODY_TIMEOUT_S = 30.0
"""A request body must have arrived this long after its headers."""
REAP_INTERVAL_S = 1.0
ACCEPT_BACKOFF_S = 0.05
"""Pause after a failed accept (descriptors exhausted) before trying again."""
LISTEN_BACKLOG = 128
MAX_REFUSED_PEERS_RECORDED = 20
"""Refused peers reported per socket; later ones are only counted."""

RESERVED_CONNECTIONS_PER_SOCKET = 4
"""Connections a socket may always hold, whatever the run's budget says (a runner
needs two or three); sockets are bounded by the run's concurrency, so this is too."""
MAX_CONNECTIONS_PER_RUN = 4096
"""Most broker connections open at once over a whole run (all sockets)."""
MIN_CONNECTIONS_PER_RUN = 8
FD_SHARE_FOR_CONNECTIONS = 2
"""Connections may take at most 1/this of the open-file limit; the rest is kept for
files, pipes and the engine client."""

_PEERCRED = struct.Struct("3i")
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
MAX_PEER_GROUPS = 256
"""Supplementary groups read from a peer (a container has a handful; Python reads at
most 1024 bytes of an option). A peer with more is refused."""
SANDBOX_GROUPS = range(2_110_000_000, 2_147_000_000)
"""Where a socket directory's own gid is picked: above every account range (and
above the fallback sandbox uid), below 2**31 so every engine takes it."""
_GROUP_IN_NAME = re.compile(re.escape(SOCKET_ROOT_PREFIX) + r"g(\d+)-")


@dataclass
class ConnectionBudget:
    """Broker connections open at once over every socket of a run."""

    limit: int
    open: int = 0

    @classmethod
    def for_limit(cls, open_files: int, in_use: int = 0) -> ConnectionBudget:
        """A budget within `open_files` (the process's soft RLIMIT_NOFILE) less the
        `in_use` descriptors the process already holds (an embedding program, a test
        runner: what they hold is not there for the run)."""
        share = max(0, open_files - in_use) // FD_SHARE_FOR_CONNECTIONS
        return cls(max(MIN_CONNECTIONS_PER_RUN, min(MAX_CONNECTIONS_PER_RUN, share)))

    def take(self) -> None:
        """Count one admitted connection (a socket's reserved ones may pass the limit)."""
        self.open += 1

    def give(self) -> None:
        self.open = max(0, self.open - 1)


Notice = Callable[[str, str], Awaitable[None]]
"""(kind, message): report something once; the callee records it."""


@dataclass(frozen=True)
class SandboxIdentity:
    """Who may connect: the sandbox's uid/gid, and the orchestrator's own uid."""

    uid: int
    gid: int

    @property
    def allowed_uids(self) -> frozenset[int]:
        return frozenset({self.uid, os.getuid()})


def make_socket_dir(identity: SandboxIdentity, root: Path) -> Path:
    """A fresh socket directory under `root` (`lifecycle.socket_dirs.socket_root()`)
    with a group of its own (`sandbox_group`), which only its owner and the one
    container given that group (`SandboxSpec.groups`) can enter."""
    taken = {m.group(1) for m in map(_GROUP_IN_NAME.match, os.listdir(root)) if m}
    gid = random.choice(SANDBOX_GROUPS)
    while str(gid) in taken:
        gid = random.choice(SANDBOX_GROUPS)
    path = Path(tempfile.mkdtemp(prefix=f"{SOCKET_ROOT_PREFIX}g{gid}-", dir=root))
    try:
        os.chown(path, -1, gid)
        path.chmod(DIR_MODE)
    except PermissionError:
        # Not root: only the peer check (uid and this group) guards it.
        path.chmod(0o711 if identity.uid != os.getuid() else 0o700)
        log.warning(
            "cannot give the broker socket directory to gid %d; access is checked by "
            "peer credentials only",
            gid,
        )
    return path


def _close_accepted(accepting: asyncio.Future[tuple[socket.socket, object]]) -> None:
    """Close what an abandoned accept accepted after all, if anything."""
    if not accepting.cancelled() and accepting.exception() is None:
        accepting.result()[0].close()


def sandbox_group(socket_dir: Path) -> int | None:
    """The gid of `socket_dir`'s own sandbox (None for a directory not made by
    `make_socket_dir`)."""
    found = _GROUP_IN_NAME.match(socket_dir.name)
    return int(found.group(1)) if found else None


def groups_for(socket_dir: Path) -> list[int]:
    """`SandboxSpec.groups` for the container that mounts `socket_dir`."""
    group = sandbox_group(socket_dir)
    return [] if group is None else [group]


def peer_uid(conn: socket.socket) -> int | None:
    try:
        _pid, uid, _gid = _PEERCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
    except OSError:
        return None
    return int(uid)


def peer_groups(conn: socket.socket) -> frozenset[int] | None:
    """The peer's primary and supplementary groups at connect time, or None."""
    try:
        _pid, _uid, gid = _PEERCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
        raw = conn.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
    except OSError:
        return None
    return frozenset({gid, *struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])})


def holds_group(conn: socket.socket, socket_dir: Path) -> bool:
    """Whether the peer of `conn` holds `socket_dir`'s own group (True for a
    directory without one). For sockets only warden's sandbox-side code uses."""
    group = sandbox_group(socket_dir)
    if group is None:
        return True
    groups = peer_groups(conn)
    return groups is not None and group in groups


def peer_refusal(
    conn: socket.socket, identity: SandboxIdentity | None, group: int | None
) -> str | None:
    """Why the peer of `conn` may not use a socket of the sandbox `identity` whose
    directory has `group` (None: it may). The orchestrator's own uid is let in
    only when it is not also the sandbox's (then it would let every sandbox in)."""
    uid = peer_uid(conn)
    if identity is None:
        return None
    if uid is None or uid not in identity.allowed_uids:
        return (
            f"refused a connection from uid {uid}: only the sandbox (uid {identity.uid}) "
            f"and the orchestrator (uid {os.getuid()}) may use this socket"
        )
    if group is None or (uid == os.getuid() and uid != identity.uid):
        return None
    groups = peer_groups(conn)
    if groups is None or group not in groups:
        return (
            f"refused a connection from uid {uid} without group {group}: this socket "
            "belongs to another sandbox (each sandbox holds only its own socket's group)"
        )
    return None


@dataclass
class _Conn:
    transport: asyncio.Transport
    accepted: float
    last_active: float
    active: int = 0


@dataclass
class Listener:
    """Accepts connections on `path` for an aiohttp server (`protocol_factory`)."""

    path: Path
    protocol_factory: Callable[[], asyncio.Protocol]
    identity: SandboxIdentity | None
    notice: Notice
    max_connections: int = MAX_CONNECTIONS_PER_SOCKET
    run_budget: ConnectionBudget | None = None
    """Shared by every socket of the run; None: this socket's cap only."""
    refused_peers: int = 0
    evicted: int = 0
    over_cap: int = 0
    accept_errors: int = 0
    _sock: socket.socket | None = field(default=None, repr=False)
    _conns: dict[asyncio.BaseTransport, _Conn] = field(default_factory=dict, repr=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, repr=False)
    _noticed: set[str] = field(default_factory=set, repr=False)

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            if self.identity is not None:
                group = sandbox_group(self.path.parent)
                with contextlib.suppress(PermissionError):
                    os.chown(self.path, -1, self.identity.gid if group is None else group)
                self.path.chmod(SOCKET_MODE)
            else:
                self.path.chmod(0o600)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._tasks = [
            asyncio.create_task(self._accept_loop(), name=f"broker-accept {self.path}"),
            asyncio.create_task(self._reap_loop(), name=f"broker-reap {self.path}"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for key in list(self._conns):
            self._forget(key).transport.close()

    # -- request tracking (called by the server's middleware) -----------------

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        conn = self._conns.get(transport) if transport is not None else None
        if conn is not None:
            conn.active += 1
            conn.last_active = time.monotonic()

    def request_finished(self, transport: asyncio.BaseTransport | None) -> None:
        conn = self._conns.get(transport) if transport is not None else None
        if conn is not None:
            conn.active = max(0, conn.active - 1)
            conn.last_active = time.monotonic()

    @property
    def open_connections(self) -> int:
        return sum(1 for c in self._conns.values() if not c.transport.is_closing())

    # -- loops ---------------------------------------------------------------

    async def _accept_loop(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        while True:
            accepting = asyncio.ensure_future(loop.sock_accept(self._sock))
            try:
                conn, _ = await asyncio.shield(accepting)
            except asyncio.CancelledError:
                # Closing: a connection accepted just as this task was cancelled would
                # be dropped unclosed (its descriptor leaked): close it instead.
                accepting.cancel()
                accepting.add_done_callback(_close_accepted)
                raise
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self.accept_errors += 1
                await self._notice_once(
                    "accept_failed",
                    f"accepting a connection failed ({errno.errorcode.get(exc.errno or 0, exc)}): "
                    "the orchestrator is out of descriptors; backing off",
                )
                await asyncio.sleep(ACCEPT_BACKOFF_S)
                continue
            try:
                await self._admit(loop, conn)
            except Exception:
                conn.close()
                log.exception("broker socket %s: could not serve a connection", self.path)

    async def _admit(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
        refusal = peer_refusal(conn, self.identity, sandbox_group(self.path.parent))
        if refusal is not None:
            conn.close()
            self.refused_peers += 1
            if self.refused_peers <= MAX_REFUSED_PEERS_RECORDED:
                await self.notice("peer_refused", refusal)
            return
        self._prune()
        if not self._within_run_budget():
            conn.close()
            self.over_cap += 1
            await self._notice_once(
                "run_connection_cap",
                f"more than {self.run_budget.limit if self.run_budget else 0} broker "
                "connections open over the whole run, all busy: new connections are closed "
                "(the cap keeps descriptors for the run's own files)",
            )
            return
        if len(self._conns) >= self.max_connections:
            victim = self._oldest_idle()
            if victim is None:
                conn.close()
                self.over_cap += 1
                await self._notice_once(
                    "connection_cap",
                    f"more than {self.max_connections} connections at once, all busy: "
                    "new connections are closed",
                )
                return
            victim.transport.close()
            self._forget(victim.transport)
            self.evicted += 1
            await self._notice_once(
                "connection_cap",
                f"more than {self.max_connections} connections at once: the oldest idle "
                "ones are closed to make room",
            )
        conn.setblocking(False)
        transport, _ = await loop.connect_accepted_socket(self.protocol_factory, conn)
        now = time.monotonic()
        self._conns[transport] = _Conn(transport, now, now)
        if self.run_budget is not None:
            self.run_budget.take()

    def _prune(self) -> None:
        for key in [k for k, c in self._conns.items() if c.transport.is_closing()]:
            self._forget(key)

    def _within_run_budget(self) -> bool:
        """Room for one more connection in the run's budget, closing this socket's
        oldest idle connection to make it when needed."""
        budget = self.run_budget
        if budget is None or budget.open < budget.limit:
            return True
        if len(self._conns) < RESERVED_CONNECTIONS_PER_SOCKET:
            return True  # this socket's own few, whoever filled the budget
        victim = self._oldest_idle()
        if victim is None:
            return False
        victim.transport.close()
        self._forget(victim.transport)
        self.evicted += 1
        return True

    def _forget(self, key: asyncio.BaseTransport) -> _Conn:
        conn = self._conns.pop(key)
        if self.run_budget is not None:
            self.run_budget.give()
        return conn

    def _oldest_idle(self) -> _Conn | None:
        idle = [c for c in self._conns.values() if c.active == 0]
        return min(idle, key=lambda c: c.last_active) if idle else None

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            now = time.monotonic()
            for conn in list(self._conns.values()):
                if conn.active == 0 and now - conn.last_active > HEADER_TIMEOUT_S:
                    conn.transport.close()
            self._prune()

    async def _notice_once(self, kind: str, message: str) -> None:
        if kind in self._noticed:
            return
        self._noticed.add(kind)
        await self.notice(kind, message)
