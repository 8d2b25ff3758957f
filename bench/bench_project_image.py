"""What a project image costs (issue 21): a subagent in an image with no Python
(Debian's nodejs + npm, `tests.toolchains`), whose runner comes from warden's
runtime mounted read-only, against a bare `docker run` of the same image, and
against warden's own agent image, all interleaved in one run.

1. Cold start: from the `Task` call to the subagent's first model request, warm
   pool off (container start + the borrowed interpreter through its own loader +
   runner imports + spec fetch), against `docker run --rm --network none
   --entrypoint true IMAGE` (CLI, start to exit) of the same image.
   Target: project cold <= 1.5 x bare.
2. Warm start: the same with a warm pool of one (the sandbox started and its
   runner imported ahead of the task), both images' back to back in each
   iteration; the figure is the median of those pairs' ratios. Target: project
   warm ~ agent warm ("as today").
3. Dev container: preparing a run whose workspace has a `.devcontainer/` with a
   Dockerfile, twice. The second must build nothing (same files, same tag).

    python3 bench/bench_project_image.py [-n 10]

Exits 0 whether or not a target is met; the table says which.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_spawn import Recorder, conversation, settle_warm, spawn_task
from benchlib import (
    agent_image,
    chown_tree,
    figure,
    median,
    ms,
    pct,
    scripted,
    temp_env,
    verdict,
)

from orchestrator import labels as wl
from orchestrator.backend.connect import connect
from orchestrator.runtime.caps import TaskManagerConfig
from tests.integration.harness import text
from tests.toolchains import ensure_toolchain

WARMUP = 1
COLD_TARGET = 1.5
"""Project image cold start / bare docker run of the same image."""
WARM_TARGET = 1.2
"""Project image warm start / agent image warm start ("as today", with noise)."""


def script(total: int) -> list[dict[str, Any]]:
    return [
        conversation(f"{kind}-{i}", [{"content": [text("done")]}])
        for i in range(total)
        for kind in ("warm", "cold")
    ]


async def bare(image: str, session: str) -> float:
    argv = ["docker", "run", "--rm", "--network", "none", "--label", f"{wl.SESSION}={session}",
            "--entrypoint", "true", image]  # fmt: skip
    started = time.perf_counter()
    await asyncio.to_thread(subprocess.run, argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


async def spawns(
    images: dict[str, str], total: int, session: str
) -> dict[str, dict[str, list[float]]]:
    """bare / cold / warm samples for each image, interleaved per iteration: both
    images' warm starts back to back from a quiet machine (both pools refilled and
    idle before each), in alternating order, then each image's bare and cold start.
    (Measuring one image's iterations after the other's put minutes of machine load
    between the two warm figures, and their ratio swung from 0.8 to 1.6.)"""
    out: dict[str, dict[str, list[float]]] = {
        label: {"bare": [], "cold": [], "warm": []} for label in images
    }
    convos = script(total)
    async with AsyncExitStack() as stack:
        runs: dict[str, dict[str, Any]] = {}
        recorder = Recorder()
        for label, image in images.items():
            run_image = None if image == "agent" else image
            for kind, pool in (("warm", 1), ("cold", 0)):
                settings, workspace = stack.enter_context(temp_env(f"bench-{label}-{kind}"))
                run, server = await stack.enter_async_context(scripted(
                    settings, workspace, convos, image=run_image,
                    config=TaskManagerConfig(warm_pool_size=pool),
                ))  # fmt: skip
                run.events.subscribe(recorder)
                runs.setdefault(label, {})[kind] = (run, server)
            runs[label]["warm"][0].manager.prewarm("general-purpose")
        refs = {
            label: run["warm"][0]
            .manager.plan.image_resolver(run["warm"][0].manager.registry.get("general-purpose"))
            .ref
            for label, run in runs.items()
        }
        labels = list(images)
        for i in range(total):
            got: dict[str, dict[str, float]] = {label: {} for label in labels}
            order = labels if i % 2 == 0 else labels[::-1]
            for label in order:
                for other in labels:
                    await settle_warm(runs[other]["warm"][0])
                run, server = runs[label]["warm"]
                got[label]["warm"] = (await spawn_task(run, server, recorder, f"warm-{i}"))["spawn"]
            for label in order:
                run, server = runs[label]["cold"]
                got[label]["bare"] = await bare(refs[label], session)
                got[label]["cold"] = (await spawn_task(run, server, recorder, f"cold-{i}"))["spawn"]
            if i >= WARMUP:
                for label in labels:
                    for key, value in got[label].items():
                        out[label][key].append(value)
            print(f"  {i + 1}/{total}: " + "; ".join(
                f"{label} " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in got[label].items())
                for label in labels), file=sys.stderr)  # fmt: skip
    return out


def devcontainer_twice(node: str) -> dict[str, Any]:
    """Prepare a run with a Dockerfile dev container twice; what each did."""
    from orchestrator.runtime.run_images import prepare_run_images

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("warden.images")
    logger.addHandler(handler := Keep())
    logger.setLevel(logging.INFO)
    client = connect()
    out: dict[str, Any] = {}
    tag = None
    try:
        with temp_env("bench-devcontainer") as (settings, workspace):
            folder = workspace / ".devcontainer"
            folder.mkdir()
            (folder / "devcontainer.json").write_text(
                '// bench\n{"build": {"dockerfile": "Dockerfile"},}\n'
            )
            (folder / "Dockerfile").write_text(
                f"FROM {node}\nUSER 0\nRUN echo {uuid.uuid4().hex} > /etc/bench-marker\nUSER 1000\n"
            )
            chown_tree(workspace)
            for attempt in ("first", "second"):
                records.clear()
                started = time.perf_counter()
                resolver = prepare_run_images(client, settings, workspace)
                out[attempt] = {
                    "seconds": time.perf_counter() - started,
                    "built": any("building warden-devcontainer" in r for r in records),
                }
                tag = resolver.run.devcontainer
    finally:
        logger.removeHandler(handler)
        if tag is not None:
            client.images.remove(tag, force=True)
        client.close()
    return out


async def main_async(args: argparse.Namespace) -> None:
    client = connect()
    node = ensure_toolchain(client, "node")
    client.close()
    session = f"bench-{uuid.uuid4().hex[:12]}"
    total = args.iterations + WARMUP
    results = await spawns({"agent": "agent", "project": node}, total, session)
    dev = await asyncio.to_thread(devcontainer_twice, node)

    print(f"\nimages: agent = {agent_image()}, project = {node} (nodejs + npm, no Python)")
    print(f"{args.iterations} iterations after {WARMUP} warm-up, interleaved; medians (p95)\n")
    for label in ("agent", "project"):
        for kind in ("bare", "cold", "warm"):
            values = results[label][kind]
            print(f"  {label:<8} {kind:<5} median {ms(median(values))}   p95 {ms(pct(values, 95))}")
    cold_ratio = median(results["project"]["cold"]) / median(results["project"]["bare"])
    # Each iteration runs the two warm starts back to back (alternating which goes
    # first): the median of those pairs' ratios cancels the load drift between
    # iterations that a ratio of the two medians keeps (figures of ~20 ms, where one
    # loaded iteration moves a median of a few by a third).
    pairs = zip(results["project"]["warm"], results["agent"]["warm"], strict=True)
    warm_ratio = median([project / agent for project, agent in pairs])
    warm_of_medians = median(results["project"]["warm"]) / median(results["agent"]["warm"])
    cold_agent = median(results["agent"]["cold"]) / median(results["agent"]["bare"])
    figure("project image cold start / bare docker run", cold_ratio, COLD_TARGET,
           floor=cold_agent, floor_note="warden's cold start of its own agent image / its "
           "bare docker run, same run")  # fmt: skip
    figure("project image warm start / agent warm start", warm_ratio, WARM_TARGET, floor=1.0,
           floor_note="the agent image's warm start, same run")  # fmt: skip
    print("\n| figure | ratio | target |")
    print("|---|---|---|")
    print(f"| project cold start / bare docker run of the project image | {cold_ratio:.2f} | "
          f"<= {COLD_TARGET} {verdict(cold_ratio, COLD_TARGET)} |")  # fmt: skip
    print(
        f"| (reference) agent cold start / bare docker run of the agent image | {cold_agent:.2f} | - |"
    )
    print(f"| project warm start / agent warm start (median of paired ratios) | {warm_ratio:.2f} | "
          f"<= {WARM_TARGET} {verdict(warm_ratio, WARM_TARGET)} |")  # fmt: skip
    print(f"| (reference) project warm median / agent warm median | {warm_of_medians:.2f} | - |")
    print(f"| dev container, first prepare | {dev['first']['seconds']:.1f} s | "
          f"built: {'yes' if dev['first']['built'] else 'no'} |")  # fmt: skip
    print(f"| dev container, second prepare | {dev['second']['seconds']:.2f} s | built: "
          f"{'yes (FAIL)' if dev['second']['built'] else 'no (met)'} |")  # fmt: skip
    if args.json:
        print(json.dumps({"results": results, "devcontainer": dev}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="also print the samples as JSON")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
