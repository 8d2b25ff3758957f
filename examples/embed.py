"""Embedding warden in your own program: run sandboxed subagents, answer their
questions with a callback, watch their events.

    ANTHROPIC_API_KEY=… python3 examples/embed.py /path/to/workspace

The model endpoint comes from the environment (ANTHROPIC_API_KEY, and
ANTHROPIC_BASE_URL for another Anthropic-compatible endpoint); the test suite runs
this file against warden's scripted model server and the real Docker engine
(tests/integration/test_api_example.py).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from orchestrator.api import (
    ApprovalAnswer,
    ApprovalQuestion,
    Event,
    RunConfig,
    TaskRefusedError,
    open_session,
)
from orchestrator.untrusted_text import printable


def approve(question: ApprovalQuestion) -> ApprovalAnswer:
    """Every "ask" comes here (in a worker thread; an async function works too)."""
    command = question.tool_input.get("command")
    if question.tool_name == "Bash" and isinstance(command, str) and command.startswith("echo "):
        return ApprovalAnswer(behavior="allow", channel="embed-example")
    return ApprovalAnswer(
        behavior="deny", reason="this pipeline only allows echo", channel="embed-example"
    )


def show(event: Event) -> None:
    """Events arrive on the event loop: do not block here. Their text is a container's."""
    if event.kind in ("task_started", "task_completed", "permission_denied"):
        print(f"event: {event.kind} {event.agent_type} {printable(event.data.get('reason', ''))}")


async def main(workspace: Path) -> None:
    # mode "default": Bash calls ask, so the callback decides them.
    config = RunConfig(workspace=workspace, mode="default", label="embed example")
    async with open_session(config, on_question=approve) as run:
        print("agent types:", ", ".join(agent.name for agent in run.agent_types()))
        unsubscribe = run.subscribe(show)

        result = await run.task(
            {
                "description": "write a note",
                "prompt": "Write hello into note.txt with echo, then say done.",
                "subagent_type": "bash",
            }
        )
        print("foreground:", result.status.value, printable(result.text))

        task_id = await run.start(
            {"description": "list files", "prompt": "List the files with ls.",
             "subagent_type": "bash"}
        )  # fmt: skip
        later = await run.output(task_id, timeout_s=120)
        assert later is not None
        print("background:", later.status.value, printable(later.text))

        try:
            await run.task({"description": "x", "prompt": "x", "subagent_type": "no-such-type"})
        except TaskRefusedError as exc:
            print("refused:", exc)
        unsubscribe()
    print(f"run {run.run_id} ended; its events: {run.events_path}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
