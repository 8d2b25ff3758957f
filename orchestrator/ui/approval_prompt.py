"""The approval prompt a person answers on a terminal (`TerminalApprover`), and
the one-line echo of an answer the live display prints (`describe_answer`).

Everything in a question that came from a container (tool input, descriptions) is
untrusted and shown as data: control characters and ANSI escapes are made visible,
so a subagent cannot clear the screen, move the cursor or print a fake prompt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable
from typing import TextIO

from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.untrusted_text import as_data

log = logging.getLogger(__name__)

MAX_SHOWN_INPUT_CHARS = 4000
"""Tool input shown in a prompt; longer input is cut and the cut announced."""


def chain_text(q: ApprovalQuestion) -> str:
    """`run R → parent agent → sa_A (general-purpose) → sa_B (bash)`: who asks, through whom."""
    ids = list(q.chain) if q.chain and q.chain[-1] == q.task_id else [*q.chain, q.task_id]
    agents = [*q.chain_agents, *["?"] * len(ids)][: len(ids)]
    agents[-1] = q.agent_type
    hops = [f"{task_id} ({agent})" for task_id, agent in zip(ids, agents, strict=True)]
    head = [f"run {q.run_id}"] if q.run_id else []
    return " → ".join([*head, "parent agent", *hops])


def render_question(q: ApprovalQuestion) -> str:
    """The question as plain text, container-originated parts quoted as data."""
    shown = json.dumps(q.tool_input, indent=2, ensure_ascii=False)
    cut = ""
    if len(shown) > MAX_SHOWN_INPUT_CHARS:
        cut = f"\n  [input cut at {MAX_SHOWN_INPUT_CHARS} of {len(shown)} characters]"
        shown = shown[:MAX_SHOWN_INPUT_CHARS]
    body = "\n".join("  │ " + line for line in as_data(shown).split("\n"))
    desc = "\n".join("  │ " + line for line in as_data(q.description).split("\n"))
    return (
        f"Permission request from task {as_data(q.task_id)} ({as_data(q.agent_type)})\n"
        f"  chain: {as_data(chain_text(q))}\n"
        f"  task description (from the agent, shown as data):\n{desc}\n"
        f"  tool: {as_data(q.tool_name)}   input sha256: {q.input_hash[:16]}\n"
        f"  input (from the agent, shown as data):\n{body}{cut}\n"
        f"  asked by: {as_data(q.asked_by)} — {as_data(q.reason)}"
    )


class TerminalApprover:
    """Asks a person on a TTY: allow once, allow for the session, or deny with a reason."""

    def __init__(
        self, *, stdin: TextIO | None = None, stdout: TextIO | None = None, user: str = "terminal"
    ) -> None:
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._user = user
        self._lock = asyncio.Lock()  # one prompt at a time; other subagents keep running

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        async with self._lock:
            return await asyncio.to_thread(self._ask, q)

    def _ask(self, q: ApprovalQuestion) -> ApprovalAnswer:
        """Show the question, then read answers. A display failure never becomes a
        silent deny: the prompt falls back to plain writes, and only when even those
        fail is the call denied, with a reason that says so."""
        try:
            show_prompt = self._show_rich(q)
        except Exception as exc:  # a rendering bug must not cost the user the question
            log.warning("approval panel could not be drawn (%s); asking in plain text", exc)
            try:
                show_prompt = self._show_plain(q)
            except Exception as plain_exc:
                return _display_failed(plain_exc, self._user)
        while True:
            try:
                show_prompt()
            except Exception as exc:
                return _display_failed(exc, self._user)
            line = self._in.readline()
            if not line:
                return ApprovalAnswer(
                    behavior="deny", reason="no answer (end of input)", decided_by=self._user
                )
            choice = line.strip().lower()
            if choice in ("a", "allow"):
                return ApprovalAnswer(behavior="allow", scope="once", decided_by=self._user)
            if choice in ("s", "session"):
                return ApprovalAnswer(behavior="allow", scope="session", decided_by=self._user)
            if choice in ("w", "always") and q.always_rule:
                self._write(
                    f"Always allow: add the rule {as_data(q.always_rule)} to "
                    f"{as_data(q.always_file)}? [y/N] "
                )
                if self._in.readline().strip().lower() in ("y", "yes"):
                    return ApprovalAnswer(behavior="allow", scope="always", decided_by=self._user)
                continue
            if choice in ("d", "deny"):
                self._write("Reason (told to the agent): ")
                reason = self._in.readline().strip() or "denied by the user"
                return ApprovalAnswer(behavior="deny", reason=reason, decided_by=self._user)

    def _show_rich(self, q: ApprovalQuestion) -> Callable[[], None]:
        from rich.console import Console
        from rich.panel import Panel
        from rich.text import Text

        console = Console(file=self._out, highlight=False, emoji=False, markup=False)
        # Text, never a markup string: the question carries container text.
        console.print(Panel(Text(render_question(q)), title="warden: approval needed"))
        choices = Text.assemble(("[a]", "bold"), choices_text(q).removeprefix("[a]"))
        return lambda: console.print(choices, end="")

    def _show_plain(self, q: ApprovalQuestion) -> Callable[[], None]:
        self._write(f"warden: approval needed\n{render_question(q)}\n")
        return lambda: self._write(choices_text(q))

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def note(self, text: str) -> None:
        """A line around the prompt (queue length, the answer given); never fails."""
        try:
            self._write(text + "\n")
        except Exception:
            log.warning("could not write to the terminal: %s", text)


def describe_answer(q: ApprovalQuestion, answer: ApprovalAnswer) -> str:
    """The answer echoed back in one line, e.g. `denied Bash for sa_… (bash): reason`."""
    if answer.behavior == "deny":
        what = "denied"
    elif answer.scope == "always" and q.always_rule:
        what = f"always allowed (rule {as_data(q.always_rule)} for {as_data(q.always_file)})"
    elif answer.scope in ("session", "always"):
        what = "allowed this exact input for the rest of this run"
    else:
        what = "allowed once"
    reason = f": {as_data(answer.reason)}" if answer.behavior == "deny" and answer.reason else ""
    return f"warden: {what}: {as_data(q.tool_name)} for {as_data(q.task_id)} ({as_data(q.agent_type)}){reason}"


PLAIN_CHOICES = "[a]llow once  [s] allow this exact input again for the rest of this run  [d]eny > "


def choices_text(q: ApprovalQuestion) -> str:
    """The answers offered; "always allow" only when an exact rule exists."""
    if not q.always_rule:
        return PLAIN_CHOICES
    return PLAIN_CHOICES.replace(
        "  [d]eny",
        f"\n  [w] always allow: add {as_data(q.always_rule)} to {as_data(q.always_file)}  [d]eny",
    )


def _display_failed(exc: Exception, user: str) -> ApprovalAnswer:
    log.error("the approval prompt could not be shown: %r", exc)
    return ApprovalAnswer(
        behavior="deny",
        reason=(
            f"the approval prompt could not be shown on the terminal (display failed: "
            f"{type(exc).__name__}), so the call is denied; nobody saw it"
        ),
        decided_by=user,
    )
