"""Did the kernel's OOM killer strike inside this sandbox? Read from our own cgroup.

A process that outgrows the container's memory limit is killed by the kernel with
SIGKILL, which on its own reads like any other kill.

The OOM killer picks the process with the highest badness, and the runner must not
be it: it is the one that reports what happened. Each Bash call's shell gives itself
the highest `oom_score_adj` (1000) before its command runs (`EXPENDABLE_ENV`: bash
sources `expendable.sh` at start-up), so it and everything it starts go first. The
child sets it, never the runner around the fork: that left a window in which the
runner carried 1000 itself; and no `preexec_fn`, which is unsafe in a threaded
process. The memory cgroup counts OOM
kills (cgroup v1: `oom_kill` in `memory.oom_control`; v2: `oom_kill` in
`memory.events`), and the container sees its own cgroup read-only, so a tool can
compare the count before and after a command and say what happened.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_OOM_CONTROL = CGROUP_ROOT / "memory" / "memory.oom_control"
V1_LIMIT = CGROUP_ROOT / "memory" / "memory.limit_in_bytes"
V2_EVENTS = CGROUP_ROOT / "memory.events"
V2_LIMIT = CGROUP_ROOT / "memory.max"
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


EXPENDABLE_SCRIPT = Path(__file__).with_name("expendable.sh")
EXPENDABLE_ENV = {"BASH_ENV": str(EXPENDABLE_SCRIPT)}
"""Added to a Bash call's environment: its shell sources the script first."""
