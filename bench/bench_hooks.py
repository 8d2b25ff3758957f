"""What a sandboxed PreToolUse hook adds to a tool call (issue 19).

Every hook the person has not trusted runs in a hook sandbox from the run's warm
pool (`orchestrator.permissions.hook_sandbox`). This bench builds that pool as
`open_run` does (real engine, agent image, the run's workspace guard and
identity) and times `PermissionEngine.evaluate` for one Bash call, in one
interleaved loop, three ways:

- no hook (the rules alone: the baseline);
- the hook on the host (trusted by the user's settings);
- the same hook in a sandbox (the default).

The hook is a typical validator: it reads the event from stdin and blocks
`rm -rf`. "Added" is a way's p50 minus the baseline's p50. Target: the sandboxed
hook adds at most 30 ms p50 per call.

Between calls the loop waits `--gap` seconds, standing in for the model turn
that separates two tool calls (the pool refills a used sandbox in the
background meanwhile). Two more figures are reported:

- bursts: a model turn that asks for `BURST_SIZE` tool calls, the calls back to
  back, then a model turn (`BURST_GAP_S`) before the next burst. The pool grows
  to meet such turns (`HOOK_POOL_MOST`), so only the first bursts wait.
- sustained: `SUSTAINED_CALLS` calls back to back and nothing else. Every call
  needs a container started and one removed, so past the pool's size the calls
  come no faster than the engine starts containers (on 2 shared cores, a few per
  second): this figure's floor is the engine's start rate, not the pool.

    python3 bench/bench_hooks.py [-n 40] [--gap 0.5]

Exits 0 whether or not the target is met; the table says which.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import figure, median, ms, pct, temp_env, verdict

from orchestrator.backend.connect import connect
from orchestrator.backend.factory import make_backend
from orchestrator.images import resolve_image
from orchestrator.permissions import (
    CallContext,
    HookSet,
    PermissionEngine,
    ToolCall,
    load_policy,
)
from orchestrator.permissions.hooks import parse_hooks
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.hook_sandbox import HOOK_IMAGE, hook_sandbox_pool
from orchestrator.runtime.sandbox import sandbox_identity
from orchestrator.runtime.session import prepare_guard

DEFAULT_CALLS = 40
DEFAULT_GAP_S = 0.5
BURST_SIZE = 5
"""Tool calls one model turn asks for in the burst figure."""
BURST_GAP_S = 2.0
"""The model turn between two bursts (one that asks for five tool calls takes longer)."""
BURSTS = 6
SUSTAINED_CALLS = 20
ADDED_TARGET_S = 0.030
HOOK = "grep -q 'rm -rf' && exit 2 || exit 0"
CTX = CallContext(session_id="bench", agent_id="sa_bench", agent_type="general-purpose")


def hookset(trusted: bool) -> HookSet:
    block = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": HOOK}]}]}
    found, _ = parse_hooks(block, "bench")
    return HookSet(tuple(found), trusted_commands=frozenset({HOOK} if trusted else ()))


async def measure(calls: int, gap_s: float, burst: int = 1) -> dict[str, list[float]]:
    """`calls` rounds (one call each way, in rotating order); `gap_s` after each
    call, or, with `burst` > 1, only after every `burst` rounds (then no warm-up
    rounds: the first burst, which finds the pool at its resting size, is kept,
    and also reported alone)."""
    with temp_env("hooks") as (settings, workspace):
        client = await asyncio.to_thread(connect)
        backend = make_backend(client, settings)
        guard = prepare_guard(settings, workspace, ())
        config = TaskManagerConfig(fallback_uid=settings.fallback_uid)
        image = resolve_image(client, HOOK_IMAGE)  # a run resolves its images once
        pool = hook_sandbox_pool(
            backend=backend,
            image_for=lambda name: image,
            workspace=workspace,
            guard=guard,
            identity=sandbox_identity(workspace, config.fallback_uid),
            disk=config.disk,
            session=f"bench-hooks-{int(time.time())}",
            run_id="bench",
        )
        policy = load_policy(settings, workspace, allow=("Bash(echo:*)",), mode="default")
        engines = {
            "no hook": PermissionEngine(policy, HookSet(), workspace_host=workspace),
            "host hook": PermissionEngine(policy, hookset(True), workspace_host=workspace),
            "sandboxed hook": PermissionEngine(
                policy, hookset(False), workspace_host=workspace, sandbox=pool
            ),
        }
        call = ToolCall(tool_name="Bash", tool_input={"command": "echo hi", "description": "d"})
        times: dict[str, list[float]] = {name: [] for name in engines}
        try:
            pool.warm()
            await asyncio.sleep(3)  # the pool's first sandboxes start
            names = list(engines)
            warmup = 2 if burst == 1 else 0
            for i in range(calls + warmup):
                for name in names[i % 3 :] + names[: i % 3]:  # rotate the order
                    started = time.perf_counter()
                    decision = await engines[name].evaluate(call, CTX)
                    took = time.perf_counter() - started
                    assert decision.behavior == "allow", (name, decision)
                    assert not any(o.error for o in decision.hook_outcomes), decision
                    if i >= warmup:
                        times[name].append(took)
                    if burst > 1 and i < burst and name == "sandboxed hook":
                        times.setdefault("sandboxed, 1st burst", []).append(took)
                    if burst == 1:
                        await asyncio.sleep(gap_s)
                if burst > 1 and (i + 1) % burst == 0:
                    await asyncio.sleep(gap_s)
        finally:
            await pool.close()
            guard.release()
            client.close()
        return times


def report(title: str, times: dict[str, list[float]]) -> None:
    base = median(times["no hook"])
    print(f"\n{title}")
    print(f"{'way':<16}{'p50':>10}{'p90':>10}{'added p50':>12}")
    for name, values in times.items():
        added = median(values) - base
        print(f"{name:<16}{ms(median(values)):>10}{ms(pct(values, 90)):>10}{ms(added):>12}")
    added = median(times["sandboxed hook"]) - base
    host_added = median(times["host hook"]) - base
    figure(f"sandboxed PreToolUse hook added, p50 ({title.split(':')[0]})", added * 1000,
           ADDED_TARGET_S * 1000, "ms", floor=host_added * 1000,
           floor_note="the same hook run on the host, no sandbox")  # fmt: skip
    over_host = median(times["sandboxed hook"]) - median(times["host hook"])
    print(
        f"sandboxed hook adds {ms(added).strip()} p50 per call (target <= "
        f"{ms(ADDED_TARGET_S).strip()}: {verdict(added, ADDED_TARGET_S)}); "
        f"{ms(over_host).strip()} more than the same hook on the host"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--gap", type=float, default=DEFAULT_GAP_S)
    args = parser.parse_args()
    paced = asyncio.run(measure(args.calls, args.gap))
    report(f"{args.calls} calls, {args.gap:g} s between calls (a model turn)", paced)
    bursts = asyncio.run(measure(BURST_SIZE * BURSTS, BURST_GAP_S, burst=BURST_SIZE))
    report(f"bursts: {BURST_SIZE} calls back to back, {BURST_GAP_S:g} s model turn between "
           f"bursts, {BURSTS} bursts", bursts)  # fmt: skip
    sustained = asyncio.run(measure(SUSTAINED_CALLS, 0.0))
    report(f"{SUSTAINED_CALLS} calls back to back (no model turn between them)", sustained)


if __name__ == "__main__":
    main()
