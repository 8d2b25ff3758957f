"""What a subagent costs with the Messages API's prompt caching, whether a long one
stays inside its context window, and what streaming adds, all through the real
runner, broker and anthropic SDK against the scripted model (which bills like the
API: orchestrator/scripted/billing.py). Every figure is read from the usage the
server reported for each request, as a bill would be; nothing here does the
server's arithmetic.

    python3 bench/bench_cost.py            # the issue's sizes
    python3 bench/bench_cost.py --quick    # smaller, for a smoke run
    python3 bench/bench_cost.py --only streaming

1. Caching: a fixed 30-turn task (the shipped general-purpose system prompt and
   tools, tool results of a few KB) run as shipped and with every breakpoint
   removed. Billed input-token equivalents (uncached x1, cache writes x1.25, reads
   x0.1) against the ideal (every prefix token written once, read on every later
   turn). Target: <= 1.15x the ideal.
2. Forks: a parent turn that starts 5 fork-mode subagents: the share of their first
   requests' input read from the cache. Target: >= 80 %.
3. Context: a 200-turn subagent with 20 KB tool results against a 200k window: no
   "prompt is too long", and it finishes.
4. Streaming: p50 time of one model call through the broker, streamed upstream vs
   plain, interleaved in the same run, the scripted model in its own process (as
   the API is). Target: <= 2 ms more.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REPO_ROOT, figure, median, pct, verdict

from orchestrator.agents.registry import GENERAL_PURPOSE_PROMPT
from orchestrator.broker.wire_models import TaskSpec
from orchestrator.config import DEFAULT_MODEL
from orchestrator.scripted import (
    Conversation,
    Match,
    Script,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
    Turn,
)
from sandbox_tools import runner as runner_module
from sandbox_tools import wire
from tests.unit.broker.host_subagent import run_subagent

WRITE, READ = 1.25, 0.1
"""Prices of a 5-minute cache write and a cache read, relative to uncached input."""
CACHE_TARGET, FORK_TARGET, STREAM_TARGET_MS = 1.15, 0.80, 2.0
PARTS = ("caching", "forks", "context", "streaming")


# -- helpers ----------------------------------------------------------------------


def billed(usage: dict[str, Any]) -> float:
    return float(
        usage.get("input_tokens", 0)
        + WRITE * usage.get("cache_creation_input_tokens", 0)
        + READ * usage.get("cache_read_input_tokens", 0)
    )


def read_tokens(usage: dict[str, Any]) -> int:
    return int(usage.get("cache_read_input_tokens", 0))


def prompt_tokens(usage: dict[str, Any]) -> int:
    return int(
        usage.get("input_tokens", 0)
        + usage.get("cache_creation_input_tokens", 0)
        + usage.get("cache_read_input_tokens", 0)
    )


def usages(server: ScriptedModelServer, start: int = 0) -> list[dict[str, Any]]:
    return [r.usage for r in server.requests[start:] if isinstance(r.usage, dict)]


def ideal(prompts: list[int]) -> float:
    """Each prompt token written once (x1.25) and read on every later request (x0.1)."""
    total, previous = 0.0, 0
    for size in prompts:
        total += WRITE * max(0, size - previous) + READ * min(previous, size)
        previous = size
    return total


@contextlib.contextmanager
def no_breakpoints() -> Iterator[None]:
    """The runner as it was before caching: no `cache_control` anywhere."""

    def plain_system(text: str) -> list[Any]:
        return [{"type": "text", "text": text}]

    def plain(items: list[Any]) -> list[Any]:
        return list(items)

    with (
        mock.patch.object(runner_module, "system_blocks", plain_system),
        mock.patch.object(runner_module, "cached_messages", plain),
        mock.patch.object(runner_module, "cached_tools", plain),
    ):
        yield


def spec(prompt: str, max_turns: int, **extra: Any) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": "sa_bench",
            "trace_id": "t",
            "agent_type": "general-purpose",
            "model": DEFAULT_MODEL,
            "system_prompt": GENERAL_PURPOSE_PROMPT,
            "prompt": prompt,
            "tools": list(wire.TOOL_NAMES),
            "max_turns": max_turns,
            **extra,
        }
    )


_TEMP_DIRS: list[Path] = []


def _remove_temp_dirs() -> None:
    for path in _TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)


def temp_dir(prefix: str) -> Path:
    """A temporary directory removed when the benchmark exits (whatever way it ends)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if not _TEMP_DIRS:
        atexit.register(_remove_temp_dirs)
    _TEMP_DIRS.append(path)
    return path


def workspace(files: int, size: int) -> Path:
    root = temp_dir("warden-bench-cost-")
    (root / "src").mkdir()
    for i in range(files):
        body = "".join(
            f"def handler_{i}_{n}(request):\n    return process(request, {n})  # step {n}\n\n"
            for n in range(size // 70)
        )
        (root / "src" / f"module_{i}.py").write_text(body)
    return root


# -- 1. caching -------------------------------------------------------------------


def review_script(turns: int) -> Script:
    steps: list[Turn] = []
    for n in range(turns - 1):
        tool = [
            ToolUseBlock(name="Read", input={"file_path": f"src/module_{n % 10}.py"}),
            ToolUseBlock(name="Grep", input={"pattern": f"step {n % 40}", "path": "src"}),
            ToolUseBlock(name="Glob", input={"pattern": "src/*.py"}),
        ][n % 3]
        steps.append(Turn(content=[TextBlock(text=f"Step {n + 1}: checking."), tool]))
    steps.append(Turn(content=[TextBlock(text="Review done: every handler calls process().")]))
    return Script(conversations=[Conversation(name="review", match=Match(), turns=steps)])


async def caching(turns: int) -> None:
    print(f"\n1. caching: a {turns}-turn subagent (shipped system prompt and tools)")
    root = workspace(10, 3000)
    rows = []
    for label, patch in (("cached", contextlib.nullcontext()), ("no caching", no_breakpoints())):
        with ScriptedModelServer(review_script(turns)).in_thread() as server, patch:
            run = await run_subagent(
                server.base_url, spec("Review the handlers in src/.", turns + 2), root
            )
            assert run.host.results[-1].status == "completed", run.host.results
            calls = usages(server)
        rows.append((label, calls))
    cached, plain = rows[0][1], rows[1][1]
    prompts = [prompt_tokens(u) for u in cached]
    best = ideal(prompts)
    got, base = sum(billed(u) for u in cached), sum(billed(u) for u in plain)
    assert [prompt_tokens(u) for u in plain] == prompts, "caching changed what was sent"
    print(f"   requests {len(cached)}, prompt tokens {prompts[0]} .. {prompts[-1]}")
    print(f"   billed input equivalents: cached {got:,.0f}, no caching {base:,.0f}")
    print(f"   ideal {best:,.0f}: cached / ideal = {got / best:.3f} (target <= {CACHE_TARGET})")
    print(f"   no caching / cached = {base / got:.1f}x   {verdict(got / best, CACHE_TARGET)}")
    figure("30-turn subagent billed input / ideal", got / best, CACHE_TARGET, floor=1.0,
           floor_note="the ideal: every repeated prefix of the same requests read from cache")  # fmt: skip


# -- 2. forks ---------------------------------------------------------------------


async def forks(count: int) -> None:
    """A parent (the real parent loop, fork mode on) whose first turn starts `count`
    fork-mode subagents; each runs the real runner behind its own broker (the
    containers are threads here: `RunnerBackend` of the task-manager tests)."""
    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.broker import Upstream
    from orchestrator.broker.upstream import model_client
    from orchestrator.images.choice import SandboxImage
    from orchestrator.results.parent_transcript import ObservedClient
    from orchestrator.runtime.caps import TaskManagerConfig
    from orchestrator.runtime.events import EventLog
    from orchestrator.runtime.manager import TaskManager
    from orchestrator.runtime.parent import ParentAgent
    from orchestrator.store import Store
    from tests.unit.runtime.test_manager import RunnerBackend, Wire

    print(f"\n2. forks: one parent turn starts {count} fork-mode subagents")
    calls = [
        ToolUseBlock(
            name="Task",
            input={
                "description": f"review part {i}",
                "prompt": f"Review src/module_{i}.py and report problems.",
                "subagent_type": "general-purpose",
                "fork": True,
            },
        )
        for i in range(count)
    ]
    history = "We are reviewing the request handlers in src/ before the release. " * 40
    script = Script(
        conversations=[
            Conversation(
                name="fork",
                match=Match(last_message_contains="[Fork mode]"),
                turns=[Turn(content=[TextBlock(text="-")])]
                + [Turn(content=[TextBlock(text="No problems found.")])] * 2,
            ),
            Conversation(
                name="parent",
                match=Match(has_tool="TaskStop"),
                turns=[
                    Turn(content=[TextBlock(text="Splitting the review."), *calls]),
                    Turn(content=[TextBlock(text="All parts reviewed.")]),
                ],
            ),
        ]
    )
    root = workspace(count, 3000)
    state = temp_dir("warden-bench-fork-")
    store = Store.open(state / "warden.db")
    store.create_run("run_bench", prompt="p", workspace=str(root), model=DEFAULT_MODEL, pid=1)
    with ScriptedModelServer(script).in_thread() as server:

        def runner(w: Wire) -> None:
            runner_module.run(w.socket_path, root)

        backend = RunnerBackend(runner)
        client = model_client(server.base_url, None, max_retries=0)
        manager = TaskManager(
            backend=backend,
            registry=AgentRegistry(),
            upstream=Upstream(client=client),
            events=EventLog("run_bench", state / "events.jsonl", store),
            store=store,
            workspace=root,
            session="bench-cost",
            run_id="run_bench",
            trace_id="trace",
            default_model=DEFAULT_MODEL,
            image_resolver=lambda agent: SandboxImage(name="agent", ref="image-agent"),
            config=TaskManagerConfig(warm_pool_size=0),
            runner_command=("in-thread-runner",),
        )
        parent = ParentAgent(
            client=ObservedClient(client, []), model=DEFAULT_MODEL, manager=manager, fork=True
        )
        outcome = await parent.run(f"{history}\nReview every module, one subagent per module.")
        await manager.close()
        await client.close()
        store.close()
        firsts = [r.usage for r in server.requests if r.conversation == "fork" and r.turn == 1]
    assert outcome.text == "All parts reviewed.", outcome.text
    reads = sum(read_tokens(u) for u in firsts if isinstance(u, dict))
    total = sum(prompt_tokens(u) for u in firsts if isinstance(u, dict))
    share = reads / total
    print(f"   {len(firsts)} first requests, {total:,} input tokens, {reads:,} read from cache")
    figure("fork-mode first requests read from cache", share * 100, FORK_TARGET * 100, "%<",
           floor_note="none measured: the share any client gets depends on the prompts")  # fmt: skip
    print(
        f"   cache-read share {share:.1%} (target >= {FORK_TARGET:.0%})   "
        f"{'meets target' if share >= FORK_TARGET else 'MISSES target'}"
    )


# -- 3. context -------------------------------------------------------------------


def long_script(calls: int) -> Script:
    step = (
        "n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count; "
        f'head -c 20000 big.log; echo " [call $n]"; if [ $n -ge {calls} ]; then echo ALL DONE; fi'
    )
    return Script(
        conversations=[
            Conversation(
                name="stop",
                match=Match(last_message_contains="ALL DONE"),
                turns=[Turn(content=[TextBlock(text="Finished the log.")])] * (calls + 50),
            ),
            Conversation(
                name="summary",
                match=Match(last_message_contains="outgrow the context window"),
                turns=[Turn(content=[TextBlock(text="Summary: read the log chunk by chunk.")])]
                * (calls + 50),
            ),
            Conversation(
                name="reader",
                match=Match(),
                turns=[Turn(content=[ToolUseBlock(name="Bash", input={"command": step})])]
                * (calls + 50),
            ),
        ]
    )


async def context(calls: int, window: int) -> None:
    print(f"\n3. context: {calls} turns with 20 KB tool results, a {window:,}-token window")
    root = temp_dir("warden-bench-ctx-")
    (root / "big.log").write_text("2026-11-26 12:00:00 INFO request served in 12 ms\n" * 500)
    model = "claude-bench-window"
    with ScriptedModelServer(long_script(calls), context_windows={model: window}).in_thread() as s:
        started = time.monotonic()
        run = await run_subagent(
            s.base_url,
            spec(
                "Read big.log a chunk at a time until it is over.",
                calls * 2,
                model=model,
                context_window_tokens=window,
            ),
            root,
        )
        took = time.monotonic() - started
        too_long = sum(
            1
            for r in s.requests
            if r.status == 400 and "prompt is too long" in json.dumps(r.body or "")
        )
        refused = sum(1 for r in s.requests if r.status != 200)
        biggest = max(prompt_tokens(u) for u in usages(s))
        summaries = sum(1 for r in s.requests if r.conversation == "summary")
        read_share = sum(u.get("cache_read_input_tokens", 0) for u in usages(s)) / sum(
            prompt_tokens(u) for u in usages(s)
        )
    result = run.host.results[-1]
    print(f"   {len(s.requests)} requests in {took:.1f} s, {summaries} summaries, largest prompt")
    print(f"   {biggest:,} tokens; refused {refused} ({too_long} 'prompt is too long');")
    print(f"   cache reads {read_share:.0%} of input; result: {result.status} ({result.text!r})")
    print(f"   {'meets target' if refused == 0 and result.status == 'completed' else 'MISSES'}")
    figure("long subagent: requests refused (prompt too long)", refused, 0, "",
           note=f"result {result.status}", floor=0.0, floor_note="no request refused")  # fmt: skip


# -- 4. streaming -----------------------------------------------------------------


@contextlib.contextmanager
def server_process(script: Script) -> Iterator[str]:
    """The scripted model in its own process (as the API is: in the broker's process
    its event writing would share the broker's interpreter lock); its base URL."""
    with tempfile.TemporaryDirectory(prefix="wbs-script-") as directory:
        path = Path(directory) / "script.json"
        path.write_text(script.model_dump_json(exclude_none=True))
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.scripted", str(path)],
            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "listening on" not in line:
                raise SystemExit(f"the scripted model server did not start: {line!r}")
            yield line.rsplit(" ", 1)[1].strip()
        finally:
            proc.terminate()
            proc.wait(30)


async def streaming(calls: int) -> None:
    import httpx2

    from orchestrator.broker import Broker, Budget, Upstream
    from orchestrator.broker.upstream import model_client
    from tests.unit.broker.test_server import RecordingHost

    print(f"\n4. streaming: {calls} model calls through the broker, each way, interleaved")
    text = "The handler validates the request, then calls process() once. " * 12
    script = Script(
        conversations=[
            Conversation(name="a", match=Match(), turns=[Turn(content=[TextBlock(text=text)])])
        ]
    )
    body = {"max_tokens": 500, "messages": [{"role": "user", "content": "explain the handler"}]}
    timings: dict[bool, list[float]] = {True: [], False: []}
    with server_process(script) as base_url:
        brokers = {}
        stack = contextlib.AsyncExitStack()
        async with stack:
            for streamed in (True, False):
                directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="wbs-"))
                upstream = Upstream(model_client(base_url, None), stream=streamed)
                broker = Broker(
                    socket_dir=Path(directory),
                    spec=spec("x", calls + 10),
                    upstream=upstream,
                    host=RecordingHost(),
                    budget=Budget(max_turns=calls + 10),
                )
                await stack.enter_async_context(broker)
                client = httpx2.AsyncClient(
                    transport=httpx2.AsyncHTTPTransport(uds=str(broker.socket_path)),
                    base_url=wire.BROKER_BASE_URL,
                    timeout=60,
                )
                brokers[streamed] = (client, upstream)
            for n in range(calls + 5):
                for streamed in (n % 2 == 0, n % 2 == 1):
                    client, _ = brokers[streamed]
                    started = time.perf_counter()
                    response = await client.post("/v1/messages", json=body)
                    elapsed = time.perf_counter() - started
                    assert response.status_code == 200, response.text
                    if n >= 5:  # warm-up
                        timings[streamed].append(elapsed)
            for client, upstream in brokers.values():
                await client.aclose()
                await upstream.client.close()
    s50, p50 = median(timings[True]) * 1000, median(timings[False]) * 1000
    extra = s50 - p50
    figure("streaming added per model call, p50", extra, STREAM_TARGET_MS, "ms", floor=0.0,
           floor_note="the same call through the same broker, not streamed, same run")  # fmt: skip
    print(f"   p50 streamed {s50:.2f} ms, plain {p50:.2f} ms: +{extra:.2f} ms per call")
    print(
        f"   p90 streamed {pct(timings[True], 90) * 1000:.2f} ms, plain {pct(timings[False], 90) * 1000:.2f} ms"
    )
    print(
        f"   {'meets target' if extra <= STREAM_TARGET_MS else 'MISSES target'} (<= {STREAM_TARGET_MS} ms)"
    )


async def main_async(args: argparse.Namespace) -> None:
    parts = args.only or list(PARTS)
    if "caching" in parts:
        await caching(args.turns)
    if "forks" in parts:
        await forks(args.forks)
    if "context" in parts:
        await context(args.long_turns, args.window)
    if "streaming" in parts:
        await streaming(args.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--long-turns", type=int, default=200)
    parser.add_argument("--window", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", action="append", choices=PARTS, help="run only this part")
    args = parser.parse_args()
    if args.quick:
        args.long_turns, args.window, args.calls = 40, 30_000, 40
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
