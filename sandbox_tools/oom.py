"""Did the kernel's OOM killer strike inside this sandbox? Read from our own cgroup.

A process that outgrows the container's memory limit is killed by the kernel with
SIGKILL, which on its own reads like any other kill.

The OOM killer picks the process with the highest badness, and the runner must not
be it: it is the one that reports what happened. `expendable_children` starts the
tools' processes with the highest `oom_score_adj` (1000), so any of them goes first.
An unprivileged process may raise its own value and lower it back to where it
started, so the runner raises it only around the fork (children inherit it) and
restores it at once; no `preexec_fn`, which is unsafe in a threaded process. The memory cgroup counts OOM
kills (cgroup v1: `oom_kill` in `memory.oom_control`; v2: `oom_kill` in
`memory.events`), and the container sees its own cgroup read-only, so a tool can
compare the count before and after a command and say what happened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_OOM_CONTROL = CGROUP_ROOT / "memory" / "memory.oom_control"
V1_LIMIT = CGROUP_ROOT / "memory" / "memory.limit_in_bytes"
V2_EVENTS = CGROUP_ROOT / "memory.events"
V2_LIMIT = CGROUP_ROOT / "memory.max"
OOM_SCORE_ADJ = Path("/proc/self/oom_score_adj")
EXPENDABLE_SCORE = "1000"
"""The highest `oom_score_adj`: killed before anything else in the cgroup."""
UNLIMITED_BYTES = 1 << 60
"""cgroup v1 reports "no limit" as a huge number (PAGE_COUNTER_MAX pages)."""


def _counter(path: Path, key: str) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def oom_kills() -> int | None:
    """How many processes the OOM killer has ended in this cgroup; None if unknown."""
    count = _counter(V1_OOM_CONTROL, "oom_kill")
    return count if count is not None else _counter(V2_EVENTS, "oom_kill")


def memory_limit() -> int | None:
    """The memory limit in bytes; None when unlimited or unknown."""
    for path in (V1_LIMIT, V2_LIMIT):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < UNLIMITED_BYTES:
            return int(text)
        return None
    return None


def describe_limit(limit: int | None) -> str:
    if limit is None:
        return "unknown"
    mib = limit / (1024 * 1024)
    return f"{mib:g} MiB" if mib >= 1 else f"{limit} bytes"


@contextlib.contextmanager
def expendable_children() -> Iterator[None]:
    """Processes started inside the block are the OOM killer's first choice."""
    try:
        before = OOM_SCORE_ADJ.read_text().strip()
        OOM_SCORE_ADJ.write_text(EXPENDABLE_SCORE)
    except OSError:
        yield  # no /proc or not allowed: the kernel's default choice stands
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            OOM_SCORE_ADJ.write_text(before)
