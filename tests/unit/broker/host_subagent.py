"""A whole subagent loop without a container: the real runner (in a thread, its
tools on a temporary workspace) talking to a real `Broker`, which calls the
scripted model through the anthropic SDK. For tests and benchmarks of what the
loop sends and what it costs; isolation is the integration tests' business."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.broker import Broker, Budget, Upstream
from orchestrator.broker.limits import TRANSCRIPT_BYTES_PER_TASK, Allowance
from orchestrator.broker.upstream import model_client
from orchestrator.broker.wire_models import TaskSpec
from sandbox_tools.runner import run
from tests.unit.broker.test_server import RecordingHost


@dataclass
class HostRun:
    """How one subagent run on the host went."""

    exit_code: int
    host: RecordingHost
    """What the broker handed the host: permissions, events, transcripts, the result."""
    budget: Budget
    """The broker's count of turns and tokens (by usage field)."""


async def run_subagent(
    base_url: str, spec: TaskSpec, workspace: Path, *, stream: bool = True
) -> HostRun:
    """Run `spec` to its end: the runner against a broker whose upstream is `base_url`."""
    upstream = Upstream(model_client(base_url, None, max_retries=0), stream=stream)
    host = RecordingHost()
    budget = Budget(max_turns=spec.max_turns)
    with tempfile.TemporaryDirectory(prefix="whs-") as socket_dir:
        broker = Broker(
            socket_dir=Path(socket_dir), spec=spec, upstream=upstream, host=host, budget=budget
        )
        # A scripted loop turns far faster than a model: lift the checkpoint flood
        # limit (its rate, not what the runner sends), so every checkpoint is kept.
        broker.allowances["/v1/transcript"] = Allowance(
            "/v1/transcript", 1e6, 10**6, TRANSCRIPT_BYTES_PER_TASK * 16
        )
        async with broker:
            code = await asyncio.to_thread(run, str(broker.socket_path), workspace)
    await upstream.client.close()
    return HostRun(code, host, budget)
