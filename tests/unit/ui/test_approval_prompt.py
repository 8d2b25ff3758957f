"""Locks in what a person answering questions sees: the chain names the run, the
parent agent and every ancestor once (not `sa_X → sa_X`) with agent types; the
session choice says what it covers; with several questions waiting each prompt
says how many more wait, and every answer is echoed."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.ui.approval_prompt import (
    PLAIN_CHOICES,
    chain_text,
    describe_answer,
    render_question,
)
from orchestrator.ui.progress import Progress, _PausingApprover


def _question(task_id: str = "sa_child", **extra: Any) -> ApprovalQuestion:
    fields: dict[str, Any] = {
        "task_id": task_id,
        "agent_type": "bash",
        "description": "count lines",
        "chain": ("sa_root", task_id),
        "chain_agents": ("general-purpose", "bash"),
        "run_id": "run_1",
        "tool_name": "Bash",
        "tool_input": {"command": "wc -l *.py"},
        "input_hash": "0" * 64,
        "asked_by": "mode: default",
    }
    return ApprovalQuestion(**(fields | extra))


def test_the_chain_names_run_parent_and_each_ancestor_once() -> None:
    assert chain_text(_question()) == (
        "run run_1 → parent agent → sa_root (general-purpose) → sa_child (bash)"
    )
    # A root-level task's chain is itself only; an older caller's chain without the
    # task itself still ends with it exactly once.
    assert chain_text(_question(chain=("sa_child",), chain_agents=("bash",))).endswith(
        "parent agent → sa_child (bash)"
    )
    assert chain_text(_question(chain=("sa_root",), chain_agents=())).endswith(
        "sa_root (?) → sa_child (bash)"
    )
    shown = render_question(_question())
    assert "sa_child (bash) → sa_child" not in shown and "count lines" in shown


def test_the_session_choice_says_what_it_covers() -> None:
    assert "allow this exact input again for the rest of this run" in PLAIN_CHOICES


class _Inner:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.release = asyncio.Event()

    def note(self, text: str) -> None:
        self.notes.append(text)

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        await self.release.wait()
        if q.task_id == "sa_b":
            return ApprovalAnswer(behavior="deny", reason="no", decided_by="terminal")
        return ApprovalAnswer(behavior="allow", scope="session", decided_by="terminal")


async def test_queued_questions_are_counted_and_each_answer_echoed() -> None:
    inner = _Inner()
    approver = Progress(json_mode=False).pausing(inner)
    asks = [asyncio.create_task(approver.approve(_question(t))) for t in ("sa_a", "sa_b", "sa_c")]
    await asyncio.sleep(0.05)
    inner.release.set()
    answers = await asyncio.gather(*asks)
    assert [a.behavior for a in answers] == ["allow", "deny", "allow"]
    # The first was asked before the others arrived; each later prompt counts the
    # questions still behind it.
    assert inner.notes == [
        # Two arrived while the first was on screen: each is announced as it arrives
        # (on a line of its own, below the choices), and the echo counts them again.
        "\nwarden: 1 more question(s) waiting after this one",
        "\nwarden: 2 more question(s) waiting after this one",
        "warden: allowed this exact input for the rest of this run: Bash for sa_a (bash)"
        " (2 more waiting)",
        "warden: 1 more question(s) waiting after this one",
        "warden: denied: Bash for sa_b (bash): no (1 more waiting)",
        "warden: allowed this exact input for the rest of this run: Bash for sa_c (bash)",
    ]
    assert isinstance(approver, _PausingApprover) and approver.waiting == 0
    assert describe_answer(
        _question(), ApprovalAnswer(behavior="allow", decided_by="x")
    ).startswith("warden: allowed once: Bash")
    always = _question().model_copy(
        update={"always_rule": "Bash(make)", "always_file": "/w/.claude/settings.local.json"}
    )
    assert describe_answer(
        always, ApprovalAnswer(behavior="allow", scope="always", decided_by="x")
    ).startswith(
        "warden: always allowed (rule Bash(make) for /w/.claude/settings.local.json): Bash"
    )


def test_the_live_display_is_a_tree_with_background_marker_and_denials() -> None:
    import io

    from rich.console import Console

    from orchestrator.results.models import Event

    progress = Progress(json_mode=False, stream=io.StringIO())
    for event in (
        Event(kind="task_started", run_id="r", task_id="sa_p", agent_type="general-purpose",
              data={"description": "outer", "background": True}),
        Event(kind="task_started", run_id="r", task_id="sa_c", parent_id="sa_p",
              agent_type="bash", data={"description": "inner\x1b[2J"}),
        Event(kind="permission_denied", run_id="r", task_id="sa_c", parent_id="sa_p",
              data={"tool_name": "Bash", "decided_by": "rule: Bash(rm:*)", "reason": "no"}),
    ):  # fmt: skip
        progress(event)
    out = io.StringIO()
    Console(file=out, width=200).print(progress._draw_table())
    lines = out.getvalue().splitlines()
    parent = next(i for i, line in enumerate(lines) if "sa_p" in line)
    child = lines[parent + 1]
    assert "(background) outer" in lines[parent]
    assert "  sa_c inner\\x1b[2J" in child and "\x1b" not in out.getvalue()
    assert child.split("│")[4].strip() == "1"  # the denial, on the asking task's row
    lines_mode = Progress(json_mode=False, stream=io.StringIO())
    started = Event(kind="task_started", run_id="r", task_id="sa_c", parent_id="sa_p",
                    agent_type="bash", data={"description": "inner", "background": True})  # fmt: skip
    assert "started (background, under sa_p): inner" in (lines_mode._line(started) or "")


async def test_an_answer_typed_the_moment_the_next_prompt_appears_counts() -> None:
    """After a prompt is withdrawn (answered elsewhere), typing meant for it answers
    nothing; but a key the person presses as soon as the next prompt is drawn is for
    that prompt, even when it is read before the prompt has finished setting up."""
    import io
    import os
    import threading
    import time

    from orchestrator.ui.approval_prompt import TerminalApprover

    read_fd, write_fd = os.pipe()

    class Screen(io.StringIO):
        armed = False

        def write(self, s: str) -> int:
            written = super().write(s)
            if self.armed and "llow once" in s:
                self.armed = False
                os.write(write_fd, b"a\n")  # the person answers at once...
                time.sleep(0.3)  # ...and the key is read while the prompt is drawn
            return written

    screen = Screen()
    typed = os.fdopen(read_fd, "r")
    try:
        approver = TerminalApprover(stdin=typed, stdout=screen, user="alice")
        first = asyncio.create_task(approver.approve(_question("sa_one")))
        while "llow once" not in screen.getvalue():
            await asyncio.sleep(0.01)
        first.cancel()  # answered on another channel
        with contextlib.suppress(asyncio.CancelledError):
            await first
        screen.armed = True
        second = asyncio.create_task(approver.approve(_question("sa_two")))
        done, _ = await asyncio.wait({second}, timeout=10)
        assert done, "the answer typed at once was dropped as meant for the withdrawn prompt"
    finally:
        os.close(write_fd)  # end of input: the reader thread ends, and any prompt with it
        for thread in threading.enumerate():
            if thread.name == "warden-prompt-input":
                await asyncio.to_thread(thread.join, 10)
        typed.close()
    assert (second.result().behavior, second.result().person) == ("allow", "alice")
