"""A Task through `warden mcp` against the same Task through `warden run` (issue 23).

Both are real processes of this tree against one scripted model server in this
process (its `received_at` and this process's clock are the same clock), the same
workspace, the same `bash` subagent answering at once; samples alternate.

- `warden run -p "…"`: the parent's model calls Task at once. From the Task call (the
  parent's first model request, which the scripted server answers with the call) to
  the subagent's first model request; and from the process start.
- `warden mcp` (stdio) with the `mcp` SDK's client: spawn, initialize, list tools, call
  Task. From the `tools/call` to the subagent's first model request; and from the
  process start (spawn).

Target: the MCP figure from the Task call within 1.2 times the `warden run` one.

    python3 bench/bench_mcp.py [-n 7]

Exits 0 whether or not the target is met; the table says which.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import first_request_at, median, ms, temp_env, verdict
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import REPO_ROOT, warden_argv, warden_env

DEFAULT_SAMPLES = 7
TARGET = 1.2
API_KEY = "sk-ant-bench-mcp"


def script(n: int) -> Script:
    conversations: list[dict[str, Any]] = []
    for i in range(n):
        conversations.append(
            {
                "name": f"run-parent-{i}",
                "match": {"prompt_contains": f"RUN-PARENT-{i:03d}"},
                "turns": [
                    {"content": [{"type": "tool_use", "name": "Task", "input": {
                        "description": "bench", "prompt": f"RUN-SUB-{i:03d}",
                        "subagent_type": "bash"}}]},
                    {"content": [{"type": "text", "text": "done"}]},
                ],
            }
        )  # fmt: skip
        for side in ("RUN", "MCP"):
            conversations.append(
                {
                    "name": f"{side.lower()}-sub-{i}",
                    "match": {"prompt_contains": f"{side}-SUB-{i:03d}"},
                    "turns": [{"content": [{"type": "text", "text": "ok"}]}],
                }
            )
    return Script.model_validate({"conversations": conversations})


def environment(settings: Any, server: ScriptedModelServer) -> dict[str, str]:
    return warden_env(
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_API_KEY=API_KEY,
        WARDEN_STATE_DIR=str(settings.state_dir),
        WARDEN_CONFIG_DIR=str(settings.config_dir),
        CI="true",
    )


def run_sample(
    i: int, env: dict[str, str], workspace: Path, server: ScriptedModelServer
) -> tuple[float, float]:
    start = time.time()
    subprocess.run(
        warden_argv("run", "-p", "--permission-mode", "bypassPermissions", "--trust-workspace",
                    "--workspace", str(workspace), f"RUN-PARENT-{i:03d}"),
        env=env, cwd=REPO_ROOT, capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    call = first_request_at(server, f"run-parent-{i}")
    first = first_request_at(server, f"run-sub-{i}")
    assert call is not None and first is not None
    return first - call, first - start


async def mcp_sample(
    i: int, env: dict[str, str], workspace: Path, server: ScriptedModelServer
) -> tuple[float, float]:
    argv = warden_argv("mcp", "--permission-mode", "bypassPermissions", "--trust-workspace",
                       "--workspace", str(workspace))  # fmt: skip
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(REPO_ROOT))
    with open(os.devnull, "w") as quiet:
        start = time.time()
        async with stdio_client(params, errlog=quiet) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            await session.list_tools()
            call = time.time()
            done = await session.call_tool(
                "Task",
                {"description": "bench", "prompt": f"MCP-SUB-{i:03d}", "subagent_type": "bash"},
            )
            assert not done.is_error, done
    first = first_request_at(server, f"mcp-sub-{i}")
    assert first is not None
    return first - call, first - start


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=DEFAULT_SAMPLES)
    args = parser.parse_args()
    by_call: dict[str, list[float]] = {"run": [], "mcp": []}
    by_start: dict[str, list[float]] = {"run": [], "mcp": []}
    server_cm = ScriptedModelServer(script(args.n), expected_api_key=API_KEY).in_thread()
    with temp_env("bench-mcp") as (settings, workspace), server_cm as server:
        env = environment(settings, server)
        for i in range(args.n):  # alternating, so load drifts hit both alike
            first_call, first_start = await asyncio.to_thread(run_sample, i, env, workspace, server)
            by_call["run"].append(first_call)
            by_start["run"].append(first_start)
            first_call, first_start = await mcp_sample(i, env, workspace, server)
            by_call["mcp"].append(first_call)
            by_start["mcp"].append(first_start)
            print(
                f"sample {i}: run {ms(by_call['run'][-1])} / {ms(by_start['run'][-1])}, "
                f"mcp {ms(by_call['mcp'][-1])} / {ms(by_start['mcp'][-1])} "
                "(from the Task call / from the process start)",
                flush=True,
            )
    call_ratio = median(by_call["mcp"]) / median(by_call["run"])
    start_ratio = median(by_start["mcp"]) / median(by_start["run"])
    print()
    print(f"{'median of ' + str(args.n):<34} {'warden run':>12} {'warden mcp':>12} {'ratio':>7}")
    print(
        f"{'Task call → first model request':<34} {ms(median(by_call['run'])):>12} "
        f"{ms(median(by_call['mcp'])):>12} {call_ratio:>6.2f}x  {verdict(call_ratio, TARGET)}"
    )
    print(
        f"{'process start → first request':<34} {ms(median(by_start['run'])):>12} "
        f"{ms(median(by_start['mcp'])):>12} {start_ratio:>6.2f}x  (no target)"
    )


if __name__ == "__main__":
    asyncio.run(main())
