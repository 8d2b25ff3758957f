"""What the approver hub adds to one question (issue 24).

Every "ask" now goes through `ApproverHub`, which offers it to each live channel and
takes the first answer. This times, interleaved in one loop, a question answered at
once by one in-process channel:

- directly (`channel.approve(q)`): the cost before the hub;
- through a hub with that one channel;
- through a hub with three channels, one answering and two that wait and are then
  withdrawn (the terminal, the page and a webhook all live).

Target: the one-channel hub adds under 0.1 ms per question, a tenth of the 1 ms the
issue allows the page on a permission round trip (bench_permission.py measures that
round trip itself).

    python3 bench/bench_approval_hub.py [-n 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import figure

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approval_hub import ApproverHub
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion, Approver

DEFAULT_QUESTIONS = 5000
WARMUP = 200
OVERHEAD_TARGET_MS = 0.1

ANSWER = ApprovalAnswer(behavior="allow", channel="callback", person="bench")


class Answers:
    name = "answers"

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        return ANSWER


class Waits:
    name = "waits"

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    def withdraw(self, question_id: str, answer: ApprovalAnswer) -> None:
        pass


def question(i: int) -> ApprovalQuestion:
    tool_input: JSONObject = {"command": f"echo {i}"}
    return ApprovalQuestion(
        task_id="sa_bench",
        agent_type="bash",
        tool_name="Bash",
        tool_input=tool_input,
        input_hash=input_hash("Bash", tool_input),
        asked_by="mode: default",
    )


async def main_async(n: int) -> None:
    ways: dict[str, Approver] = {
        "direct": Answers(),
        "hub, 1 channel": ApproverHub([Answers()]),
        "hub, 3 channels": ApproverHub([Answers(), Waits(), Waits()]),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(WARMUP + n):
        q = question(i)
        for name, approver in ways.items():
            started = time.perf_counter()
            await approver.approve(q)
            if i >= WARMUP:
                times[name].append(time.perf_counter() - started)
        await asyncio.sleep(0)  # let withdrawn offers finish cancelling
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    for name, ms in medians.items():
        print(f"{name:16} {ms * 1000:8.1f} us per question (median of {n})")
    one = medians["hub, 1 channel"] - medians["direct"]
    three = medians["hub, 3 channels"] - medians["direct"]
    direct = "the approver called directly, same run (no hub)"
    figure("hub overhead, 1 channel", one, OVERHEAD_TARGET_MS, "ms", floor=0.0, floor_note=direct)
    figure("hub overhead, 3 channels", three, OVERHEAD_TARGET_MS, "ms", floor=0.0,
           floor_note=direct)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=DEFAULT_QUESTIONS, help="questions per way")
    args = parser.parse_args()
    asyncio.run(main_async(args.n))


if __name__ == "__main__":
    main()
