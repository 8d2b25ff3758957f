"""Per-task egress limits and the meter that enforces and records them.

Counted in the proxy on the host (the container cannot touch the counters):
connections held, connections opened, bytes sent upstream (requests) and received
(responses). Every connection the proxy accepts is held from its accept, on the
accepting thread, before it waits for a byte (`hold`): one over the open-connection
cap is closed at once, so a sandbox that opens thousands of connections and sends
nothing holds at most the cap of the host's descriptors. A connection that would
cross the lifetime cap is refused before it opens; a transfer that crosses a byte
cap is cut at the cap, and the cut is recorded and announced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from orchestrator.egress.caps import DEFAULT_MAX_BYTES_DOWN as DEFAULT_MAX_BYTES_DOWN
from orchestrator.egress.caps import DEFAULT_MAX_BYTES_UP as DEFAULT_MAX_BYTES_UP
from orchestrator.egress.caps import DEFAULT_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS
from orchestrator.egress.caps import DEFAULT_MAX_OPEN_CONNECTIONS as DEFAULT_MAX_OPEN_CONNECTIONS


@dataclass(frozen=True)
class EgressLimits:
    """The caps of one task's egress; 0 turns a cap off."""

    max_bytes_up: int = DEFAULT_MAX_BYTES_UP
    max_bytes_down: int = DEFAULT_MAX_BYTES_DOWN
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_open_connections: int = DEFAULT_MAX_OPEN_CONNECTIONS

    def __post_init__(self) -> None:
        for name in ("max_bytes_up", "max_bytes_down", "max_connections", "max_open_connections"):
            if getattr(self, name) < 0:
                raise ValueError(f"egress limit {name} must be 0 (off) or positive")


@dataclass
class Destination:
    """What one task did with one host:port."""

    host: str
    port: int
    connections: int = 0
    refused: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class Meter:
    """One task's counters, checked against its limits."""

    limits: EgressLimits = field(default_factory=EgressLimits)
    connections: int = 0
    open_connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    refused_open: int = 0
    """Connections closed at their accept because the open-connection cap was reached."""
    cut: str | None = None
    """The first limit crossed (recorded once; later transfers are refused outright)."""
    destinations: dict[tuple[str, int], Destination] = field(default_factory=dict)
    _reserved: list[int] = field(default_factory=lambda: [0, 0], repr=False)
    """Bytes reserved by relays and not yet settled: [up, down]."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Relays run on their own threads and share one task's counters."""

    def destination(self, host: str, port: int) -> Destination:
        return self.destinations.setdefault((host, port), Destination(host, port))

    def hold(self) -> str | None:
        """Count a connection just accepted (from any thread, before its first byte);
        the reason it must be closed at once, or None. `closed` gives it back."""
        cap = self.limits.max_open_connections
        with self._lock:
            if cap and self.open_connections >= cap:
                self.refused_open += 1
                return f"the task's limit of {cap} open connections"
            self.open_connections += 1
            return None

    def admit(self) -> str | None:
        """Count a held connection as a client's request (over the task's life); the
        reason it may not open, or None."""
        lim = self.limits
        with self._lock:
            if self.cut is not None and "bytes" in self.cut:
                return self.cut
            if lim.max_connections and self.connections >= lim.max_connections:
                return self._crossed(f"the task's connection limit ({lim.max_connections})")
            self.connections += 1
            return None

    def opened(self, dest: Destination) -> None:
        """Count a connection to `dest` that was allowed and recorded (from any thread)."""
        with self._lock:
            dest.connections += 1

    def closed(self) -> None:
        """A held connection was closed (from any thread)."""
        with self._lock:
            self.open_connections = max(0, self.open_connections - 1)

    def allow_up(self, dest: Destination, n: int) -> int:
        """How many of `n` bytes may go upstream now (the rest crosses the cap)."""
        return self._allow(dest, n, up=True)

    def allow_down(self, dest: Destination, n: int) -> int:
        """How many of `n` bytes may come back now."""
        return self._allow(dest, n, up=False)

    def _allow(self, dest: Destination, n: int, up: bool) -> int:
        granted = self.reserve(dest, n, up=up)
        self.settle(dest, granted, granted, up=up)
        if granted < n:
            self.cross(up=up)
        return granted

    def reserve(self, dest: Destination, n: int, *, up: bool) -> int:
        """Room for up to `n` bytes, held until `settle` (no cut is recorded: the
        caller does not know yet whether that many will come)."""
        cap = self.limits.max_bytes_up if up else self.limits.max_bytes_down
        with self._lock:
            if not cap:
                return n
            used = (self.bytes_up if up else self.bytes_down) + self._reserved[0 if up else 1]
            granted = max(0, min(n, cap - used))
            self._reserved[0 if up else 1] += granted
            return granted

    def settle(self, dest: Destination, reserved: int, used: int, *, up: bool) -> None:
        """`used` of the `reserved` bytes moved; the rest is free again."""
        cap = self.limits.max_bytes_up if up else self.limits.max_bytes_down
        with self._lock:
            if cap:
                self._reserved[0 if up else 1] -= reserved
            if up:
                self.bytes_up += used
                dest.bytes_up += used
            else:
                self.bytes_down += used
                dest.bytes_down += used

    def cross(self, *, up: bool) -> None:
        """Record that a transfer met its byte cap with bytes still to move."""
        cap = self.limits.max_bytes_up if up else self.limits.max_bytes_down
        with self._lock:
            self._crossed(f"the task's limit of {cap} bytes {'sent' if up else 'received'}")

    def _crossed(self, what: str) -> str:
        if self.cut is None:
            self.cut = what
        return what
