"""Fan-out: N subagents started at once vs N bare container cycles (issues 5, 12).

For each burst size (default 20 and 50), in one run and interleaved:

- warden: N `TaskManager.start_background` calls issued together
  (`asyncio.gather`), each a `general-purpose` subagent whose scripted model
  makes one `Bash` call (`true`) and then answers; `TaskManagerConfig(
  max_concurrent_total=60, warm_pool_size=0)` -- cold, the honest headline.
  Total wall time = first call -> last result back (every container removed);
  per-task start latency = its call -> its `task_started` event (container
  running) and -> its first model request at the scripted server.
- bare: N threads released together, each a low-level docker SDK
  create/start/wait/remove cycle of the same image with `network_disabled=True`
  and `python3 -c pass`. Total wall time; per-cycle start latency = release ->
  `start()` returned.

Target (issue 12): 50 at once, cold, within 2.5x the 50 bare cycles. Peak
host memory of the orchestrator process: VmRSS sampled every 20 ms during each
warden burst (this process also hosts the scripted model server, a few MiB)
and VmHWM at the end.

`--sdk-floor` adds a reference burst: the same bare cycles running
`python3 -c "import anthropic"`, what every runner paid while it carried the
SDK (the image must still contain it).

`--warm` adds, clearly labelled, a burst taken from a warm pool sized to the
burst (prefilled and idle before the burst; refilling is switched off for the
burst so the refills do not compete with it).

    python3 bench/bench_fanout.py [--sizes 20,50] [--rounds 1] [--warm] [--sdk-floor]
    python3 bench/bench_fanout.py --quick      # 50 at once, one round: a few minutes

Exits 0 whether or not the target is met; the table says which.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    agent_image,
    figure,
    first_request_at,
    median,
    pct,
    peak_rss_kib,
    rss_now_kib,
    scripted,
    temp_env,
    verdict,
    wait_idle,
)

from orchestrator import labels as wl
from orchestrator.backend.connect import connect, pool_size
from orchestrator.backend.contract import ResourceLimits
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import PoolConfig, Settings
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.events import Event
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import text, tool

DEFAULT_SIZES = "20,50"
QUICK_SIZES = "50"
TARGET = 2.5
"""Issue 12: 50 subagents at once, cold, vs 50 bare create/start/wait/remove cycles."""
MAX_CONCURRENT = 60
RSS_SAMPLE_S = 0.02
BARE_COMMAND = ["python3", "-c", "pass"]
PREFILL_TIMEOUT_S = 300.0
SDK_FLOOR_COMMAND = ["python3", "-c", "import anthropic"]
"""Reference only: a bare cycle that pays the SDK import every warden runner pays."""


@dataclass
class Burst:
    wall: float
    start_latency: list[float]
    first_request: list[float] = field(default_factory=list)
    tail: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Errors of tasks that did not complete (reported, not fatal)."""
    """Last model request received -> task_completed (result, runner exit, container removed)."""
    rss_before_mib: float = 0.0
    rss_peak_mib: float = 0.0
    host_cpu_s: float = 0.0
    """CPU time of this process (orchestrator, brokers, host SDK, scripted server) in the burst."""


def name_of(kind: str, size: int, rnd: int, i: int) -> str:
    return f"{kind}-{size}-{rnd}-{i}"


def marker(name: str) -> str:
    return f"[FANOUT-{name}]"


def build_script(kinds: list[str], sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    turns = [{"content": [tool("Bash", command="true")]}, {"content": [text("done")]}]
    return [
        {"name": name, "match": {"prompt_contains": marker(name)}, "turns": turns}
        for kind in kinds
        for size in sizes
        for rnd in range(rounds)
        for name in (name_of(kind, size, rnd, i) for i in range(size))
    ]


class RssSampler:
    """Peak VmRSS of this process while running."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, rss_now_kib())
            self._stop.wait(RSS_SAMPLE_S)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class StartedAt:
    """Listener: host time of each task's `task_started` and `task_completed` events."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.completed: dict[str, float] = {}

    def __call__(self, event: Event) -> None:
        if event.task_id is None:
            return
        if event.kind == "task_started":
            self.times[event.task_id] = event.ts
        elif event.kind == "task_completed":
            self.completed[event.task_id] = event.ts


async def warden_burst(run: Any, server: Any, started_at: StartedAt, names: list[str]) -> Burst:
    called: dict[str, float] = {}

    async def start(name: str) -> tuple[str, str]:
        called[name] = time.time()
        ctx = await run.manager.start_background(
            TaskInput(description="fan-out", prompt=f"{marker(name)} run true", subagent_type=
                      "general-purpose")
        )  # fmt: skip
        return name, ctx.task_id

    rss_before = rss_now_kib()
    cpu_before = time.process_time()
    with RssSampler() as sampler:
        t0 = time.time()
        ids = await asyncio.gather(*(start(n) for n in names))
        results = await asyncio.gather(*(run.manager.wait_for(tid, None) for _, tid in ids))
        wall = time.time() - t0
    failed = [
        "no result" if r is None else f"{r.status.value}: {r.error}"
        for r in results
        if r is None or r.status is not TaskStatus.COMPLETED
    ]
    ok = {r.task_id for r in results if r is not None and r.status is TaskStatus.COMPLETED}
    ids = [(name, tid) for name, tid in ids if tid in ok]
    latency = [started_at.times[tid] - called[name] for name, tid in ids]
    first, tail = [], []
    for name, tid in ids:
        at = first_request_at(server, name)
        assert at is not None, f"no model request for {name}"
        first.append(at - called[name])
        last = max(r.received_at for r in server.requests if r.conversation == name)
        tail.append(started_at.completed[tid] - last)
    return Burst(
        wall,
        latency,
        first_request=first,
        tail=tail,
        failed=failed,
        rss_before_mib=rss_before / 1024,
        rss_peak_mib=sampler.peak_kib / 1024,
        host_cpu_s=time.process_time() - cpu_before,
    )


def bare_client() -> Any:
    """A low-level client for the bare baseline, sized like warden's own
    (`backend.connect.pool_size`): its pools are never full under the burst."""
    return connect(max_pool_size=pool_size(MAX_CONCURRENT)).api


def bare_burst(
    api: Any, image: str, session: str, size: int, command: list[str] = BARE_COMMAND
) -> Burst:
    go = threading.Barrier(size + 1)
    started: list[float] = [0.0] * size
    errors: list[BaseException] = []

    def cycle(i: int) -> None:
        try:
            go.wait()
            container = api.create_container(
                image,
                command=command,
                network_disabled=True,
                labels=wl.warden_labels(session, exec="bench"),
            )
            api.start(container)
            started[i] = time.time()
            api.wait(container)
            api.remove_container(container, force=True)
        except BaseException as exc:  # reported after the burst
            errors.append(exc)

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(size)]
    for t in threads:
        t.start()
    t0 = time.time()
    go.wait()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errors:
        raise SystemExit(f"{len(errors)} bare cycle(s) failed: {errors[0]!r}")
    return Burst(wall, [s - t0 for s in started])


async def prefill(run: Any, size: int) -> None:
    """Fill the warm pool to `size`, wait until every runner is idle, stop refills."""
    pool = run.manager.pool
    room = size * ResourceLimits().memory_bytes
    pool.reconfigure(PoolConfig(min_ready=size, max_ready=size, memory_budget_bytes=room))
    run.manager.prewarm("general-purpose")
    deadline = time.monotonic() + PREFILL_TIMEOUT_S
    while pool.ready_count() < size:
        if time.monotonic() > deadline:
            raise SystemExit(f"the warm pool did not reach {size} within {PREFILL_TIMEOUT_S:g} s")
        await asyncio.sleep(0.1)
    client = connect()
    try:
        found = client.api.containers(
            filters={"label": [f"{wl.SESSION}={run.session}", "warden.warm=1"]}
        )
    finally:
        client.close()
    if not await wait_idle([c["Id"] for c in found], timeout_s=PREFILL_TIMEOUT_S):
        print(
            f"  warning: warm sandboxes still busy after {PREFILL_TIMEOUT_S:g} s", file=sys.stderr
        )
    # The burst takes from the pool; no refills compete with it.
    pool.reconfigure(PoolConfig(min_ready=0, max_ready=0))


def line(label: str, values: list[float]) -> str:
    return (
        f"    {label:<44} median {median(values) * 1000:7.0f} ms   p95 {pct(values, 95) * 1000:7.0f}"
        f" ms   max {max(values) * 1000:7.0f} ms"
    )


async def main_async(args: argparse.Namespace) -> None:
    if args.quick:
        args.sizes, args.rounds = QUICK_SIZES, 1
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    image = agent_image()
    session = f"bench-{uuid.uuid4().hex[:12]}"
    kinds = ["cold", "warm"] if args.warm else ["cold"]
    script = build_script(kinds, sizes, args.rounds)
    config = TaskManagerConfig(max_concurrent_total=MAX_CONCURRENT, warm_pool_size=0)
    results: dict[tuple[str, int], list[Burst]] = {}
    client = connect()
    settings = Settings.from_env()
    backend = DockerBackend(
        client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    bare_api = bare_client()
    t_start = time.monotonic()
    try:
        with temp_env("bench-fanout") as (settings, workspace):
            async with scripted(settings, workspace, script, config=config) as (run, server):
                started_at = StartedAt()
                run.events.subscribe(started_at)
                for size in sizes:
                    for rnd in range(args.rounds):
                        names = [name_of("cold", size, rnd, i) for i in range(size)]
                        order = ["bare", "cold"] if rnd % 2 == 0 else ["cold", "bare"]
                        if args.sdk_floor:
                            order.append("sdk")
                        for variant in order:
                            if variant in ("bare", "sdk"):
                                command = BARE_COMMAND if variant == "bare" else SDK_FLOOR_COMMAND
                                burst = await asyncio.to_thread(
                                    bare_burst, bare_api, image, session, size, command
                                )
                            else:
                                burst = await warden_burst(run, server, started_at, names)
                            results.setdefault((variant, size), []).append(burst)
                            print(
                                f"  {variant} x{size} round {rnd + 1}: {burst.wall:.1f} s",
                                file=sys.stderr,
                            )
                        if args.warm:
                            await prefill(run, size)
                            names = [name_of("warm", size, rnd, i) for i in range(size)]
                            burst = await warden_burst(run, server, started_at, names)
                            results.setdefault(("warm", size), []).append(burst)
                            print(f"  warm x{size}: {burst.wall:.1f} s", file=sys.stderr)
    finally:
        backend.cleanup({wl.SESSION: session})
        client.close()
        bare_api.close()

    print(
        f"Fan-out, image {image}, {args.rounds} round(s) per size, "
        f"{time.monotonic() - t_start:.0f} s in all"
    )
    for size in sizes:
        bare = results[("bare", size)]
        bare_wall = median([b.wall for b in bare])
        print(f"  {size} at once:")
        print(f"    bare create/start/wait/remove (threads): wall {bare_wall:6.2f} s")
        print(line("  release -> start() returned", [x for b in bare for x in b.start_latency]))
        if args.sdk_floor:
            sdk_wall = median([b.wall for b in results[("sdk", size)]])
            print(
                f"    reference: the same bare cycles running `python3 -c 'import anthropic'` "
                f"(the import every runner pays): wall {sdk_wall:6.2f} s"
            )
        labels = {
            "cold": "warden, cold (no warm pool)",
            "warm": "warden, warm pool prefilled to the burst, no refill [optional]",
        }
        for kind in kinds:
            bursts = results[(kind, size)]
            wall = median([b.wall for b in bursts])
            ratio = wall / bare_wall
            print(
                f"    {labels[kind]}: wall {wall:6.2f} s, ratio {ratio:5.2f}x bare "
                f"(target <= {TARGET}x: {verdict(ratio, TARGET)})"
            )
            if args.sdk_floor:
                figure(f"{size} subagents at once, {kind} / bare", ratio, TARGET,
                       floor=sdk_wall / bare_wall, floor_note="the same bare cycles importing "
                       "the model SDK in each container, same run")  # fmt: skip
            else:
                figure(f"{size} subagents at once, {kind} / bare", ratio, TARGET,
                       floor_note="not measured in this run: pass --sdk-floor")  # fmt: skip
            print(line("  Task call -> task_started", [x for b in bursts for x in b.start_latency]))
            print(
                line(
                    "  Task call -> first model request",
                    [x for b in bursts for x in b.first_request],
                )
            )
            print(
                line(
                    "  last model request -> task_completed",
                    [x for b in bursts for x in b.tail],
                )
            )
            failed = [f for b in bursts for f in b.failed]
            if failed:
                print(
                    f"      {len(failed)} task(s) FAILED (left out of the latencies): {failed[0]}"
                )
            if args.sdk_floor:
                print(f"      ratio vs the SDK-import reference: {wall / sdk_wall:5.2f}x")
            print(
                f"      orchestrator RSS: {max(b.rss_before_mib for b in bursts):.0f} MiB before, "
                f"peak {max(b.rss_peak_mib for b in bursts):.0f} MiB during the burst; "
                f"its CPU in the burst {median([b.host_cpu_s for b in bursts]):.1f} s"
            )
    print(
        f"  orchestrator process peak RSS (VmHWM, incl. the in-process scripted model server): "
        f"{peak_rss_kib() / 1024:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="burst sizes, comma separated")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warm", action="store_true", help="also burst from a prefilled warm pool")
    parser.add_argument(
        "--sdk-floor",
        action="store_true",
        help="add a reference bare burst that imports the anthropic SDK (if the image has it)",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"sizes {QUICK_SIZES}, one round (a few minutes)"
    )
    args = parser.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
