"""What a person approves is what runs: the approval prompt leads with the fields
that decide what runs, shows them in full or announces the cut, makes invisible
characters visible and keeps agent text inside its quote bar."""

from __future__ import annotations

import hashlib
import io
import re
import unicodedata
from pathlib import Path
from typing import Any

from rich.cells import cell_len

from orchestrator.jsontypes import input_hash
from orchestrator.permissions.approvers import ApprovalQuestion
from orchestrator.ui.approval_prompt import TerminalApprover, render_question
from orchestrator.ui.question_text import MAX_DECISION_CHARS
from orchestrator.untrusted_text import as_data

FAKE = "asked by: rule Bash(*) — allowed"
"""Agent text dressed up as one of warden's own prompt lines."""


def _question(tool_name: str, tool_input: dict[str, Any], **extra: Any) -> ApprovalQuestion:
    fields: dict[str, Any] = {
        "task_id": "sa_child",
        "agent_type": "bash",
        "description": "count lines",
        "chain": ("sa_root", "sa_child"),
        "chain_agents": ("general-purpose", "bash"),
        "run_id": "run_1",
        "tool_name": tool_name,
        "tool_input": tool_input,
        "input_hash": input_hash(tool_name, tool_input),
        "asked_by": "mode: default",
    }
    return ApprovalQuestion(**(fields | extra))


def _invisible(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cf", "Cc", "Zs") and ch not in " \n"]


def test_a_padded_description_cannot_push_the_command_off_the_prompt() -> None:
    padding = "\u200b" * 20_000
    q = _question("Bash", {"description": "list files" + padding, "command": "curl x | sh"})
    shown = render_question(q)
    # The command is shown, and before the agent-written description.
    assert "curl x | sh" in shown
    assert shown.index("curl x | sh") < shown.index("list files")
    # The padding is marked (one visible escape with its count), never printed raw.
    assert "list files⟨\\u200b 20000 times⟩" in shown
    assert _invisible(shown) == []
    assert len(shown) < 2000
    # Mixed padding (no run to count) is cut with the cut announced, never mid-escape.
    mixed = "\u200b\u2060" * 5000
    shown = render_question(_question("Bash", {"description": mixed, "command": "curl x | sh"}))
    assert "curl x | sh" in shown and "more characters, shown with v]" in shown
    padding = "".join(x[4:] for x in shown.split("\n") if x.startswith("  │ \\u"))
    assert re.fullmatch(r"(\\u[0-9a-f]{4})+", padding), padding[-20:]


def test_invisible_and_confusable_characters_are_made_visible() -> None:
    sneaky = "rm\u2060 -rf\u00a0/\ufeff \U000e0041\u3164\t\u202eevil"
    assert as_data(sneaky) == ("rm\\u2060 -rf\\u00a0/\\ufeff \\U000e0041\\u3164\\t\\u202eevil")
    shown = render_question(_question("Bash", {"command": sneaky}))
    assert "rm\\u2060 -rf\\u00a0/" in shown and _invisible(shown) == []


def test_a_long_decision_field_is_cut_only_with_a_marker_and_shown_whole_on_v() -> None:
    command = "echo start; " + "x" * (MAX_DECISION_CHARS + 500) + "; rm -rf ~"
    q = _question("Bash", {"command": command})
    shown = render_question(q)
    missing = len(command) - MAX_DECISION_CHARS
    assert f"[{missing} more characters, shown with v]" in shown
    out = io.StringIO()
    answer = TerminalApprover(stdin=io.StringIO("v\na\n"), stdout=out, user="t").approve
    import asyncio

    assert asyncio.run(answer(q)).behavior == "allow"
    assert "; rm -rf ~" in out.getvalue()  # the `v` answer shows the tail


def test_write_content_shows_its_size_and_whole_hash_before_the_text() -> None:
    content = "#!/bin/sh\n" + "y" * 10_000
    digest = hashlib.sha256(content.encode()).hexdigest()
    shown = render_question(_question("Write", {"content": content, "file_path": "/w/run.sh"}))
    assert shown.index("/w/run.sh") < shown.index("#!/bin/sh")
    assert f"content: {len(content)} characters, {len(content)} bytes" in shown
    assert f"content sha256: {digest}" in shown
    assert shown.index(digest) < shown.index("#!/bin/sh")
    net = render_question(_question("Network", {"why": "x" * 900, "host": "evil.example"}))
    assert net.index("evil.example") < net.index("why")


def test_agent_text_never_draws_outside_its_quote_bar() -> None:
    """A long line would be wrapped by the terminal, its tail starting at column 0
    like warden's own lines; the prompt wraps it itself, each piece quoted."""
    line = "a" * 150 + FAKE
    q = _question(
        "Bash",
        {"command": line, "description": line + "\n" + FAKE + "\r\x1b[2K" + FAKE},
        description=line,
        reason=line,
    )
    for width in (40, 80, 120):
        shown = render_question(q, width)
        lines = shown.split("\n")
        assert all(
            cell_len(text) <= width for text in lines if "a" * 10 in text or FAKE[:6] in text
        )
        assert all(text.startswith("  │ ") for text in lines if "all" in text or "aaaa" in text)
    # Through the real rich panel on an 80-column console, too.
    out = io.StringIO()
    import asyncio

    approver = TerminalApprover(stdin=io.StringIO("a\n"), stdout=out, user="t")
    asyncio.run(approver.approve(q))
    panel = [text for text in out.getvalue().split("\n") if "allowed" in text or "aaaa" in text]
    assert panel and all(text.startswith("│   │ ") for text in panel)


def test_the_chain_shows_each_task_with_its_description(tmp_path: Path) -> None:
    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.config import Settings
    from orchestrator.permissions import load_hooks, load_policy
    from orchestrator.runtime.gate import PolicyGate
    from orchestrator.runtime.tasks import TaskContext

    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    registry = AgentRegistry.load(settings, tmp_path)
    known_tasks: dict[str, TaskContext] = {}
    gate = PolicyGate(
        policy=load_policy(settings, tmp_path, mode="default"),
        hooks=load_hooks(settings, tmp_path),
        workspace_host=tmp_path,
        approver=TerminalApprover(),
        known_tasks=known_tasks,
    )

    def task(task_id: str, parent: str | None, agent: str, description: str) -> TaskContext:
        return TaskContext(task_id=task_id, session_id=task_id, run_id="run_1", trace_id="t",
                           parent_id=parent, depth=1 if parent is None else 2,
                           agent=registry.get(agent), description=description, timeout_s=5)  # fmt: skip

    outer = task("sa_outer", None, "general-purpose", "refactor the parser\x1b[2J")
    inner = task("sa_inner", "sa_outer", "bash", "count lines")
    known_tasks.update({"sa_outer": outer, "sa_inner": inner})
    q = gate.question(
        inner, tool_name="Bash", tool_input={"command": "wc -l"}, asked_by="m", reason=""
    )
    assert q.chain_descriptions == ("refactor the parser\x1b[2J", "count lines")
    shown = render_question(q)
    assert "  │ sa_outer (general-purpose): refactor the parser\\x1b[2J →\n" in shown
    assert "  │ sa_inner (bash): count lines ← asks\n" in shown
