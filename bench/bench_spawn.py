"""Subagent spawn overhead, per-tool-call overhead, memory and idle CPU per
subagent (issues 3 and 12).

1. Spawn: time from the `Task` call (`TaskManager.run_task` invoked) to that
   subagent's first `/v1/messages` request arriving at the scripted model server
   (its `received_at`; the broker forwards it about a millisecond after it
   arrives there), against a bare `docker run --rm --network none AGENT_IMAGE
   python3 -c pass` (CLI subprocess, start to exit). Measured with a warm pool
   (`warm_pool_size=1`; before each warm sample the pool is back to one sandbox
   whose runner has finished its imports, i.e. its cgroup is idle) and cold
   (`warm_pool_size=0`: container start + interpreter + runner imports + spec
   fetch). All three are interleaved in one run.

2. Per tool call: what a user pays for one `Bash` call is the runner's whole
   cycle -- permission round trip to the host, the command in the container, its
   progress events (held and carried by the next permission request). One
   subagent gets one assistant turn with K sequential `Bash` calls; the spacing
   of consecutive permission requests arriving at the host's gate is one full
   cycle each (events no longer arrive once per call, so their spacing is not a
   clock). Cross-check from the scripted model server's clock: (time between the
   two model requests of a K-call conversation - the same for a 1-call one) /
   (K - 1), one value per round, which counts everything the turn does (the
   checkpoint, the last call's events). This is compared with
   `subprocess.run(["bash", "-c", CMD])` inside a hardened sandbox of the same
   image (same binaries, same kernel path: what warden adds, nothing else), and
   with the same on the host, in blocks interleaved with the subagents. As a
   breakdown, the Bash tool alone (`sandbox_tools.tools.run_tool`) is timed
   inside the sandbox too.

3. Memory (cgroup v1 `memory.usage_in_bytes` and rss): a warm sandbox (idle,
   waiting for a task), a subagent waiting on a slow model call, and an idle
   bare `python3` container for reference; and the CPU an idle warm sandbox
   uses (cgroup `cpuacct.usage` over a few seconds).

The last table lists each figure of issue 12 against its target.

    python3 bench/bench_spawn.py [-n 15] [--rounds 3] [--calls 30]
    python3 bench/bench_spawn.py --quick     # -n 5 --rounds 1 --calls 15: a few minutes
    python3 bench/bench_spawn.py --tools-only --rounds 3 --calls 30   # only the Bash cycle

Exits 0 whether or not a target is met; the tables say which.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    agent_image,
    figure,
    first_request_at,
    idle_cpu_ms_per_s,
    median,
    memory_of,
    ms,
    pct,
    scripted,
    temp_env,
    verdict,
    wait_idle,
)

from orchestrator import labels as wl
from orchestrator.backend.connect import connect
from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.events import Event
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import text, tool

DEFAULT_ITERATIONS = 15
WARMUP = 1
DEFAULT_ROUNDS = 3
DEFAULT_CALLS = 30
QUICK = {"iterations": 5, "rounds": 1, "calls": 15}
COLD_TARGET = 1.5
"""Issue 12: cold `Task` -> first model request, x the bare `docker run`."""
WARM_TARGET_S = 0.040
"""Issue 12: warm `Task` -> first model request, p50."""
IDLE_MEMORY_TARGET_MIB = 20.0
"""Issue 12: cgroup usage of an idle warm sandbox."""
IDLE_CPU_TARGET_MS_PER_S = 0.5
"""Issue 12: CPU of an idle warm sandbox."""
BASH_TARGET_MS = 1.5
"""Issue 12: `Bash` `true`, full cycle minus the same command by subprocess in the sandbox."""
IDLE_CPU_WINDOW_S = 3.0
WAITING_MODEL_DELAY_S = 6.0
"""How long the scripted model takes to answer the memory probe's first call."""
COMMANDS = {"true": "true", "py": "python3 -c pass"}

IN_SANDBOX_TIMING = """
import json, subprocess, sys, time
from pathlib import Path
from sandbox_tools.tools import ToolContext, run_tool
ctx = ToolContext(root=Path("/workspace"), bash_timeout_s=60)
k = int(sys.argv[1]); out = {}
for cmd in sys.argv[2:]:
    tool, sub = [], []
    for _ in range(k):
        t = time.perf_counter(); run_tool("Bash", {"command": cmd}, ctx)
        tool.append(time.perf_counter() - t)
        t = time.perf_counter(); subprocess.run(["bash", "-c", cmd], check=True)
        sub.append(time.perf_counter() - t)
    out[cmd] = {"tool": tool, "subprocess": sub}
print(json.dumps(out))
"""


def spawn_name(kind: str, i: int) -> str:
    return f"{kind}-{i}"


def marker(name: str) -> str:
    return f"[BENCH-{name}]"


def conversation(name: str, turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "match": {"prompt_contains": marker(name)}, "turns": turns}


def build_script(iterations: int, rounds: int, calls: int) -> list[dict[str, Any]]:
    convos = []
    for i in range(iterations):
        for kind in ("warm", "cold"):
            convos.append(conversation(spawn_name(kind, i), [{"content": [text("done")]}]))
    for r in range(rounds):
        for key, cmd in COMMANDS.items():
            for name, count in ((tools_name(key, r), calls), (tools_name(key, r, 1), 1)):
                calls_turn = [tool("Bash", command=cmd) for _ in range(count)]
                convos.append(
                    conversation(name, [{"content": calls_turn}, {"content": [text("done")]}])
                )
    convos.append(
        conversation(
            "mem-wait",
            [{"content": [text("done")], "delay_s": WAITING_MODEL_DELAY_S}],
        )
    )
    return convos


def tools_name(key: str, r: int, calls: int | None = None) -> str:
    """The conversation of round `r`'s Bash calls of command `key` (`calls`: the short one)."""
    return f"tools-{key}-{r}" if calls is None else f"tools-{key}-{r}-{calls}"


def task_input(name: str) -> TaskInput:
    return TaskInput(
        description="bench", prompt=f"{marker(name)} answer done", subagent_type="general-purpose"
    )


class PermissionClock:
    """When each permission request of a task reached the run's gate (perf_counter)."""

    def __init__(self, gate: Any) -> None:
        self.arrivals: dict[str, list[float]] = {}
        answer = gate.answer_tool_call

        async def timed(task: Any, request: Any) -> Any:
            self.arrivals.setdefault(task.task_id, []).append(time.perf_counter())
            return await answer(task, request)

        gate.answer_tool_call = timed


def turn_time(server: Any, name: str) -> float:
    """Seconds between a conversation's first and second model requests (its first
    turn: the model's answer going back, the tool calls, the checkpoint)."""
    times = sorted(r.received_at for r in server.requests if r.conversation == name)
    if len(times) < 2:
        raise SystemExit(f"conversation {name} made {len(times)} model requests, expected 2")
    return float(times[1] - times[0])


class Recorder:
    """Host-side event listener: task_started and tool progress, with receive times."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.tool_events: dict[str, list[tuple[str, float]]] = {}

    def __call__(self, event: Event) -> None:
        if event.task_id is None:
            return
        if event.kind == "task_started":
            self.started[event.task_id] = event.ts
        elif event.kind == "task_running" and event.data.get("tool_name") == "Bash":
            kind = str(event.data.get("event"))
            self.tool_events.setdefault(event.task_id, []).append((kind, event.ts))


async def spawn_task(run: Any, server: Any, recorder: Recorder, name: str) -> dict[str, float]:
    called = time.time()
    result = await run.manager.run_task(task_input(name))
    ended = time.time()
    if result.status is not TaskStatus.COMPLETED:
        raise SystemExit(f"bench task {name} did not complete: {result.render()}")
    first = first_request_at(server, name)
    assert first is not None, f"no model request recorded for {name}"
    return {
        "spawn": first - called,
        "container_started": recorder.started[result.task_id] - called,
        "total": ended - called,
    }


def warm_container_ids(session: str) -> list[str]:
    client = connect()
    try:
        found = client.api.containers(
            filters={"label": [f"{wl.SESSION}={session}", "warden.warm=1"]}
        )
        return [c["Id"] for c in found]
    finally:
        client.close()


async def settle_warm(run: Any) -> str:
    """Wait for one ready warm sandbox whose runner is idle; return its container id."""
    deadline = time.monotonic() + 60
    while run.manager.pool.ready_count() < 1:
        if time.monotonic() > deadline:
            raise SystemExit("the warm pool did not refill within 60 s")
        await asyncio.sleep(0.05)
    ids = warm_container_ids(run.session)
    await wait_idle(ids)
    return ids[0]


async def bare_docker_run(image: str, session: str) -> float:
    argv = ["docker", "run", "--rm", "--network", "none", "--label", f"{wl.SESSION}={session}",
            image, "python3", "-c", "pass"]  # fmt: skip
    started = time.perf_counter()
    await asyncio.to_thread(subprocess.run, argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


HOST_ENV = dict(
    os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
)
"""The host baseline's PATH finds this interpreter's directory first: a version manager's
`python3` on PATH (pyenv's shim is a bash script) would add ~70 ms to every `python3 -c
pass` and make the baseline measure the shim, not Python."""


def host_subprocess(cmd: str, calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        subprocess.run(["bash", "-c", cmd], check=True, env=HOST_ENV)
        samples.append(time.perf_counter() - started)
    return samples


def cycle_times(arrivals: list[float]) -> list[float]:
    """Full cycles: the spacing of consecutive permission requests of one task."""
    return [b - a for a, b in itertools.pairwise(arrivals)]


def in_sandbox_timing(
    backend: DockerBackend, image: str, workspace: Path, session: str, calls: int
) -> dict[str, Any]:
    spec = SandboxSpec(
        image=image,
        command=["python3", "-c", IN_SANDBOX_TIMING, str(calls), *COMMANDS.values()],
        workspace=workspace,
        warden_labels=wl.warden_labels(session, exec="bench"),
    )
    result = backend.run(spec)
    if result.exit_code != 0:
        raise SystemExit(f"in-sandbox timing failed: {result.stderr[-2000:]}")
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


async def time_event_emits(run: Any, count: int) -> list[float]:
    """Host cost of recording one event (JSONL line + SQLite row), as each runner
    event pays it before the broker answers."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await run.events.emit("bench_probe", detail="x" * 40)
        samples.append(time.perf_counter() - started)
    return samples


async def memory_section(run: Any, server: Any, image: str, session: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ctx = await run.manager.start_background(task_input("mem-wait"))
    deadline = time.monotonic() + 60
    while first_request_at(server, "mem-wait") is None:
        if time.monotonic() > deadline:
            raise SystemExit("the memory probe's subagent never called the model")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    out["running subagent, waiting on its model call"] = memory_of(ctx.container_id)
    await run.manager.wait_for(ctx.task_id, None)
    argv = ["docker", "run", "-d", "--rm", "--network", "none", "--label",
            f"{wl.SESSION}={session}", image, "python3", "-c",
            "import time; time.sleep(60)"]  # fmt: skip
    cid = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()
    try:
        await asyncio.sleep(1.0)
        out["bare idle python3 container (reference)"] = memory_of(cid)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], check=False, capture_output=True)
    return out


def show(label: str, values: list[float], with_p95: bool = True) -> None:
    extra = f"   p95 {ms(pct(values, 95))}" if with_p95 else ""
    print(f"  {label:<58} median {ms(median(values))}{extra}   (n={len(values)})")


def print_tools(
    args: argparse.Namespace,
    tool_samples: dict[str, dict[str, list[float]]],
    emit_samples: list[float],
) -> dict[str, float]:
    """The per-call table; (command key -> full cycle minus subprocess in the sandbox, ms)."""
    print()
    print(f"Per Bash tool call, {args.rounds} rounds x {args.calls} calls, interleaved")
    added: dict[str, float] = {}
    for key, cmd in COMMANDS.items():
        s = tool_samples[key]
        print(f" command `{cmd}`:")
        show("host subprocess.run(['bash','-c',CMD])", s["host"])
        show("warden Bash call, full cycle (spacing of its permission requests)", s["cycle"])
        show("   per call by the model server's clock ((K-call - 1-call turn)/(K-1))",
             s["server"], with_p95=False)  # fmt: skip
        show("   run_tool('Bash') inside a hardened sandbox", s["sandbox_tool"])
        show("   subprocess.run inside the same sandbox", s["sandbox_sub"])
        ratio = median(s["cycle"]) / median(s["host"])
        inner = median(s["sandbox_tool"]) / median(s["host"])
        print(f"  ratio full cycle / host subprocess: {ratio:5.2f}x")
        print(f"  ratio Bash tool alone in sandbox / host subprocess: {inner:5.2f}x")
        same = median(s["cycle"]) / median(s["sandbox_sub"])
        print(f"  ratio full cycle / subprocess.run in the sandbox (same binaries): {same:5.2f}x")
        overhead = median(s["cycle"]) - median(s["host"])
        print(f"  full cycle minus host subprocess: {overhead * 1000:+.1f} ms per call")
        added[key] = (median(s["cycle"]) - median(s["sandbox_sub"])) * 1000
        print(f"  full cycle minus subprocess.run in the sandbox: {added[key]:+.1f} ms per call"
              f"  (target <= +{BASH_TARGET_MS} ms: {verdict(added[key], BASH_TARGET_MS)})")  # fmt: skip
    show("host EventLog.emit alone (an event written and waited for)", emit_samples)
    if args.tools_only:
        bash_figure(added["true"])
    return added


def bash_figure(added_ms: float) -> None:
    figure("Bash `true` cycle - subprocess in the sandbox", added_ms, BASH_TARGET_MS, "ms",
           floor=0.0, floor_note="subprocess.run of the command in the same sandbox")  # fmt: skip


async def main_async(args: argparse.Namespace) -> None:
    image = agent_image()
    bench_session = f"bench-{uuid.uuid4().hex[:12]}"
    total = args.iterations + WARMUP
    script = build_script(total, args.rounds, args.calls)
    kinds = ("bare", "warm", "cold", "warm_container", "cold_container", "warm_total", "cold_total")
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    tool_samples: dict[str, dict[str, list[float]]] = {
        key: {"host": [], "cycle": [], "server": [], "sandbox_tool": [], "sandbox_sub": []}
        for key in COMMANDS
    }
    memory: dict[str, Any] = {}
    emit_samples: list[float] = []
    idle_cpu = float("nan")
    client = connect()
    settings = Settings.from_env()
    backend = DockerBackend(
        client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    started = time.monotonic()
    try:
        with (
            temp_env("bench-warm") as (warm_settings, workspace),
            temp_env("bench-cold") as (
                cold_settings,
                _,
            ),
        ):
            warm_cfg = TaskManagerConfig(warm_pool_size=1)
            cold_cfg = TaskManagerConfig(warm_pool_size=0)
            async with (
                scripted(warm_settings, workspace, script, config=warm_cfg) as (warm, warm_srv),
                scripted(cold_settings, workspace, script, config=cold_cfg) as (cold, cold_srv),
            ):
                recorder = Recorder()
                clock = PermissionClock(cold.manager.gate)
                warm.events.subscribe(recorder)
                cold.events.subscribe(recorder)
                warm.manager.prewarm("general-purpose")
                for i in range(0 if args.tools_only else total):
                    await settle_warm(warm)
                    order = ["bare", "cold"] if i % 2 == 0 else ["cold", "bare"]
                    got: dict[str, float] = {}
                    for variant in order:
                        if variant == "bare":
                            got["bare"] = await bare_docker_run(image, bench_session)
                        else:
                            c = await spawn_task(cold, cold_srv, recorder, spawn_name("cold", i))
                            got["cold"], got["cold_container"] = c["spawn"], c["container_started"]
                            got["cold_total"] = c["total"]
                    w = await spawn_task(warm, warm_srv, recorder, spawn_name("warm", i))
                    got["warm"], got["warm_container"] = w["spawn"], w["container_started"]
                    got["warm_total"] = w["total"]
                    if i >= WARMUP:
                        for key, value in got.items():
                            samples[key].append(value)
                    print(
                        f"  iteration {i + 1}/{total}: bare {got['bare'] * 1000:.0f} ms, "
                        f"cold {got['cold'] * 1000:.0f} ms, warm {got['warm'] * 1000:.0f} ms",
                        file=sys.stderr,
                    )

                if not args.tools_only:
                    warm_id = await settle_warm(warm)
                    memory["warm sandbox, idle (imports done, waiting for a task)"] = memory_of(
                        warm_id
                    )
                    idle_cpu = await idle_cpu_ms_per_s(warm_id, IDLE_CPU_WINDOW_S)

                for r in range(args.rounds):
                    for key, cmd in COMMANDS.items():
                        tool_samples[key]["host"] += await asyncio.to_thread(
                            host_subprocess, cmd, args.calls
                        )
                        turns = {}
                        for name, count in ((tools_name(key, r), args.calls),
                                            (tools_name(key, r, 1), 1)):  # fmt: skip
                            result = await cold.manager.run_task(task_input(name))
                            if result.status is not TaskStatus.COMPLETED:
                                raise SystemExit(f"tool bench task failed: {result.render()}")
                            seen = [k for k, _ in recorder.tool_events.get(result.task_id, [])]
                            arrivals = clock.arrivals.get(result.task_id, [])
                            if len(arrivals) != count or seen.count("tool_finished") != count:
                                raise SystemExit(
                                    f"expected {count} Bash calls and their events, saw "
                                    f"{len(arrivals)} permission requests and "
                                    f"{seen.count('tool_finished')} tool_finished for {name}"
                                )
                            turns[count] = turn_time(cold_srv, name)
                            if count == args.calls:
                                tool_samples[key]["cycle"] += cycle_times(arrivals)
                        per_call = (turns[args.calls] - turns[1]) / (args.calls - 1)
                        tool_samples[key]["server"].append(per_call)
                    inside = await asyncio.to_thread(
                        in_sandbox_timing, backend, image, workspace, bench_session, args.calls
                    )
                    for key, cmd in COMMANDS.items():
                        tool_samples[key]["sandbox_tool"] += inside[cmd]["tool"][1:]
                        tool_samples[key]["sandbox_sub"] += inside[cmd]["subprocess"][1:]
                    print(f"  tool round {r + 1}/{args.rounds} done", file=sys.stderr)

                emit_samples = await time_event_emits(cold, args.calls * 2)
                if not args.tools_only:
                    memory.update(await memory_section(cold, cold_srv, image, bench_session))
    finally:
        backend.cleanup({wl.SESSION: bench_session})
        client.close()
    if args.tools_only:
        print_tools(args, tool_samples, emit_samples)
        return

    print()
    print(f"Spawn overhead, {args.iterations} interleaved iterations (+{WARMUP} warm-up), "
          f"image {image}, {time.monotonic() - started:.0f} s")  # fmt: skip
    show("bare `docker run --rm --network none IMAGE python3 -c pass`", samples["bare"])
    show("warm pool: Task call -> first model request", samples["warm"])
    show("   of which Task call -> task_started (container ready)", samples["warm_container"])
    show("   Task call -> task finished (result back, container gone)", samples["warm_total"])
    show("cold: Task call -> first model request", samples["cold"])
    show("   of which Task call -> task_started (container started)", samples["cold_container"])
    show("   Task call -> task finished (result back, container gone)", samples["cold_total"])
    bare = median(samples["bare"])
    warm_ratio, cold_ratio = median(samples["warm"]) / bare, median(samples["cold"]) / bare
    warm_ms = median(samples["warm"]) * 1000
    print(f"  ratio warm / bare docker run: {warm_ratio:5.2f}x  (p50 {warm_ms:.0f} ms; target "
          f"<= {WARM_TARGET_S * 1000:.0f} ms: {verdict(warm_ms, WARM_TARGET_S * 1000)})")  # fmt: skip
    print(f"  ratio cold / bare docker run: {cold_ratio:5.2f}x  "
          f"(target <= {COLD_TARGET}x: {verdict(cold_ratio, COLD_TARGET)})")  # fmt: skip

    added = print_tools(args, tool_samples, emit_samples)

    print()
    print("Memory per container (cgroup v1; usage includes page cache)")
    for label, values in memory.items():
        print(f"  {label:<58} usage {values['usage']:6.1f} MiB   rss {values['rss']:6.1f} MiB"
              f"   cache {values['cache']:6.1f} MiB")  # fmt: skip
    print(f"  CPU of an idle warm sandbox, over {IDLE_CPU_WINDOW_S:g} s: {idle_cpu:.2f} ms/s")

    idle_mib = next(v["usage"] for k, v in memory.items() if k.startswith("warm sandbox"))
    figures = [
        ("cold Task -> first model request / bare docker run", f"{cold_ratio:.2f}x",
         f"<= {COLD_TARGET}x", verdict(cold_ratio, COLD_TARGET)),
        ("warm Task -> first model request, p50", f"{warm_ms:.0f} ms",
         f"<= {WARM_TARGET_S * 1000:.0f} ms", verdict(warm_ms, WARM_TARGET_S * 1000)),
        ("idle warm sandbox memory (cgroup usage)", f"{idle_mib:.1f} MiB",
         f"<= {IDLE_MEMORY_TARGET_MIB:g} MiB", verdict(idle_mib, IDLE_MEMORY_TARGET_MIB)),
        ("Bash `true`, full cycle - subprocess in the sandbox", f"{added['true']:+.1f} ms",
         f"<= +{BASH_TARGET_MS} ms", verdict(added["true"], BASH_TARGET_MS)),
        ("idle warm sandbox CPU", f"{idle_cpu:.2f} ms/s",
         f"<= {IDLE_CPU_TARGET_MS_PER_S} ms/s", verdict(idle_cpu, IDLE_CPU_TARGET_MS_PER_S)),
    ]  # fmt: skip
    none = "none measured: no other program does a Task's whole start"
    figure("cold Task -> first model request / bare docker run", cold_ratio, COLD_TARGET,
           floor_note=none)  # fmt: skip
    figure("warm Task -> first model request, p50", warm_ms, WARM_TARGET_S * 1000, "ms",
           floor_note=none)  # fmt: skip
    figure("idle warm sandbox memory", idle_mib, IDLE_MEMORY_TARGET_MIB, "MiB",
           floor_note="none measured: an idle runner's own footprint")  # fmt: skip
    figure("idle warm sandbox CPU", idle_cpu, IDLE_CPU_TARGET_MS_PER_S, "ms/s", floor=0.0,
           floor_note="an idle process uses none")  # fmt: skip
    bash_figure(added["true"])
    print()
    print("Issue 12 targets, this run (50 at once: bench_fanout.py)")
    for label, shown, target, met in figures:
        print(f"  {label:<52} {shown:>11}   target {target:<11} {met}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="tool-call rounds")
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="Bash calls per round")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK} (a few minutes)")
    parser.add_argument(
        "--tools-only",
        action="store_true",
        help="only the per-Bash-call figures (no spawn, memory)",
    )
    args = parser.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
