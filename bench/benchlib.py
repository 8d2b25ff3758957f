"""Helpers shared by the subagent benchmarks (spawn, permission, fan-out).

Temp state and workspaces (owned by uid 1000, as a user's would be), order
statistics, cgroup v1 readings of a container, and a scripted run built on the
integration harness. Nothing here changes orchestrator behaviour.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from orchestrator.config import Settings  # noqa: E402

UNPRIVILEGED = 1000
CGROUP_ROOT = Path("/sys/fs/cgroup")
MIB = 1024 * 1024
IDLE_WINDOW_S = 0.25
"""A container counts as idle when it used less than IDLE_CPU_MS of CPU in this window."""
IDLE_CPU_MS = 15.0
IDLE_EACH_MS = 6.0
IDLE_MACHINE_SHARE = 0.6
"""...and all of them together less than IDLE_EACH_MS each, capped at this share of
the machine (an idle warm runner polls for its socket: ~3 ms per window)."""
IDLE_TIMEOUT_S = 30.0


@contextmanager
def temp_env(prefix: str) -> Iterator[tuple[Settings, Path]]:
    """Settings with a private state/config dir and a workspace owned by uid 1000."""
    root = Path(tempfile.mkdtemp(prefix=f"warden-{prefix}-"))
    workspace = root / "workspace"
    workspace.mkdir()
    if os.geteuid() == 0:
        os.chown(workspace, UNPRIVILEGED, UNPRIVILEGED)
    try:
        yield Settings(state_dir=root / "state", config_dir=root / "config"), workspace
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compile_sources() -> None:
    """Write the bytecode (.pyc) of warden's own modules before a benchmark starts
    `python -m orchestrator` processes, as an installed warden has it. Without it (a
    fresh checkout, or modules changed since, run with PYTHONDONTWRITEBYTECODE=1 as these
    machines' sessions are), every sample compiles the modules it imports from source:
    about 40 ms of CPU per `warden exec`, 350 ms per `warden run`, measured here."""
    import compileall

    for package in ("orchestrator", "sandbox_tools"):
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def chown_tree(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, UNPRIVILEGED, UNPRIVILEGED)


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank on sorted values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def verdict(ratio: float, target: float) -> str:
    return "meets target" if ratio <= target else "MISSES target"


FIGURE_PREFIX = "BENCH-FIGURE "
"""Start of the one line per figure that `run_all.py` collects (JSON after it)."""


def figure(
    name: str,
    value: float,
    target: float,
    unit: str = "x",
    note: str = "",
    *,
    floor: float | None = None,
    floor_note: str = "",
) -> None:
    """Print one figure for `run_all.py`: `value` against `target` (lower is better;
    unit "x" for a ratio, else e.g. "ms", "MiB", "%<" when higher is better).

    `floor`: the best any program doing the same work could do, measured in the same
    run and in `value`'s unit (for a ratio: the floor program against the same
    baseline), with `floor_note` saying what that program is. A figure that misses its
    target beside a floor that misses it too is a floor, not a gap in warden."""
    higher_better = unit.endswith("<")
    met = value >= target if higher_better else value <= target
    record = {"name": name, "value": round(value, 4), "target": target,
              "unit": unit.rstrip("<"), "met": met, "higher_better": higher_better,
              "note": note, "floor": None if floor is None else round(floor, 4),
              "floor_note": floor_note}  # fmt: skip
    print(FIGURE_PREFIX + json.dumps(record), flush=True)


# -- cgroup v1 -----------------------------------------------------------------


def _cgroup(controller: str, container_id: str, name: str) -> Path:
    return CGROUP_ROOT / controller / "docker" / container_id / name


def memory_of(container_id: str) -> dict[str, float]:
    """A container's memory in MiB: cgroup usage (rss + page cache) and rss alone."""
    usage = int(_cgroup("memory", container_id, "memory.usage_in_bytes").read_text())
    stat: dict[str, int] = {}
    for line in _cgroup("memory", container_id, "memory.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        stat[key] = int(value)
    return {
        "usage": usage / MIB,
        "rss": stat.get("total_rss", stat.get("rss", 0)) / MIB,
        "cache": stat.get("total_cache", stat.get("cache", 0)) / MIB,
    }


async def idle_cpu_ms_per_s(container_id: str, seconds: float = 1.0) -> float:
    """CPU a container uses per second while it does nothing useful."""
    before = cpu_ns(container_id)
    await asyncio.sleep(seconds)
    return (cpu_ns(container_id) - before) / 1e6 / seconds


def cpu_ns(container_id: str) -> int:
    return int(_cgroup("cpuacct", container_id, "cpuacct.usage").read_text())


async def wait_idle(container_ids: Sequence[str], timeout_s: float = IDLE_TIMEOUT_S) -> bool:
    """Wait until every container is idle (e.g. a warm runner finished its imports).
    False if they were still busy at the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            before = [cpu_ns(c) for c in container_ids]
            await asyncio.sleep(IDLE_WINDOW_S)
            after = [cpu_ns(c) for c in container_ids]
        except FileNotFoundError:  # no cgroup v1 accounting here: settle by time
            await asyncio.sleep(3.0)
            return True
        deltas_ms = [(a - b) / 1e6 for a, b in zip(after, before, strict=True)]
        # Per container AND in total: under contention (many runners importing on
        # few cores) each one gets only a sliver of CPU, but the sum shows it.
        machine_ms = IDLE_WINDOW_S * 1000 * (os.cpu_count() or 1) * IDLE_MACHINE_SHARE
        total_ms = min(max(IDLE_CPU_MS, IDLE_EACH_MS * len(deltas_ms)), machine_ms)
        if all(d < IDLE_CPU_MS for d in deltas_ms) and sum(deltas_ms) < total_ms:
            return True
    return False


# -- scripted runs ---------------------------------------------------------------


def agent_image() -> str:
    from orchestrator.backend.connect import connect
    from orchestrator.images import resolve_image

    client = connect()
    try:
        return resolve_image(client, "agent")
    finally:
        client.close()


@asynccontextmanager
async def scripted(
    settings: Settings, workspace: Path, conversations: list[dict[str, Any]], **run_kwargs: Any
) -> AsyncIterator[tuple[Any, Any]]:
    """(Run, ScriptedModelServer) from the integration harness (policy: bypass unless given)."""
    from tests.integration.harness import scripted_run

    async with scripted_run(settings, workspace, conversations, **run_kwargs) as pair:
        yield pair


def first_request_at(server: Any, conversation: str) -> float | None:
    """Unix time the scripted server received that conversation's first request."""
    times = [r.received_at for r in server.requests if r.conversation == conversation]
    return min(times) if times else None


def rss_now_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
