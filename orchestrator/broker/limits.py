"""Flood limits of one broker: what a container may make the host write, and how
fast. Every endpoint that writes to disk has an `Allowance` (a token bucket for
the rate, plus a total byte cap over the task's life); a request past it is
dropped with a 429 and ONE notice per endpoint, so a flooding subagent can
neither fill the disk nor the logs. Also: the orchestrator's descriptor limit.

Token buckets are a dozen lines here; a rate-limiting library would add an
asyncio dependency for less than that.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

EVENTS_PER_S = 20.0
"""Sustained progress events per second per task (the runner sends two per tool call)."""
EVENTS_BURST = 200
EVENT_BYTES_PER_TASK = 2 * 1024 * 1024
"""Event bytes one task may have recorded over its life."""
TRANSCRIPTS_PER_S = 2.0
"""Transcript checkpoints per second per task (the runner sends one per turn)."""
TRANSCRIPTS_BURST = 20
TRANSCRIPT_BYTES_PER_TASK = 256 * 1024 * 1024
"""Checkpoint bytes one task may send over its life (each replaces the previous one
in the store, so this bounds write volume, not stored size)."""
PERMISSIONS_PER_S = 20.0
"""Permission requests per second per task (each one is written to the audit)."""
PERMISSIONS_BURST = 200
PERMISSION_BYTES_PER_TASK = 64 * 1024 * 1024
"""Tool-input bytes one task may put to the gate (and the audit) over its life."""
FORWARDING_AUDITS_PER_S = 5.0
"""Model requests per second whose forwarding decisions are audited (refused ones
cost no turn, so this is what bounds them)."""
FORWARDING_AUDITS_BURST = 50
FORWARDING_AUDIT_BYTES_PER_TASK = 8 * 1024 * 1024


@dataclass
class Allowance:
    """Rate (token bucket) and lifetime byte cap of one endpoint of one task."""

    endpoint: str
    rate_per_s: float
    burst: int
    total_bytes: int
    _tokens: float = field(init=False)
    _last: float = field(default_factory=time.monotonic, init=False)
    used_bytes: int = field(default=0, init=False)
    dropped: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._tokens = float(self.burst)

    def take(self, nbytes: int) -> str | None:
        """Consume one request of `nbytes`; None if allowed, else why it is dropped."""
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now
        if self.used_bytes + nbytes > self.total_bytes:
            self.dropped += 1
            return (
                f"{self.endpoint}: this task has sent {self.used_bytes} bytes, the limit is "
                f"{self.total_bytes}; further requests are dropped"
            )
        if self._tokens < 1.0:
            self.dropped += 1
            return (
                f"{self.endpoint}: more than {self.rate_per_s:g} requests per second "
                f"(burst {self.burst}); requests over the rate are dropped"
            )
        self._tokens -= 1.0
        self.used_bytes += nbytes
        return None


def flood_allowances() -> dict[str, Allowance]:
    """The allowances of one broker, by endpoint path."""
    return {
        "/v1/events": Allowance("/v1/events", EVENTS_PER_S, EVENTS_BURST, EVENT_BYTES_PER_TASK),
        "/v1/transcript": Allowance(
            "/v1/transcript", TRANSCRIPTS_PER_S, TRANSCRIPTS_BURST, TRANSCRIPT_BYTES_PER_TASK
        ),
        "/v1/permission": Allowance(
            "/v1/permission", PERMISSIONS_PER_S, PERMISSIONS_BURST, PERMISSION_BYTES_PER_TASK
        ),
        "forwarding audit": Allowance(
            "forwarding audit",
            FORWARDING_AUDITS_PER_S,
            FORWARDING_AUDITS_BURST,
            FORWARDING_AUDIT_BYTES_PER_TASK,
        ),
    }


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (every broker connection and
    container wait needs a descriptor); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft
    return target


def open_descriptors() -> int:
    """How many descriptors this process holds now (0 where /proc is not there)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
