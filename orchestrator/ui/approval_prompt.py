"""The approval prompt a person answers on a terminal (`TerminalApprover`), and
the one-line echo of an answer the live display prints (`describe_answer`).

Everything in a question that came from a container (tool input, descriptions) is
untrusted and shown as data: control characters and ANSI escapes are made visible,
so a subagent cannot clear the screen, move the cursor or print a fake prompt.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from orchestrator.apply.changeset import ApplyReview
from orchestrator.behavior import FinalBehavior
from orchestrator.permissions.approvers import AnswerScope, ApprovalAnswer, ApprovalQuestion
from orchestrator.ui.live_prompt import LivePrompt, PlainPrompt, Prompter, stays_live
from orchestrator.ui.question_text import (
    DEFAULT_WIDTH,
    chain_text,
    render_full_input,
    render_question,
)
from orchestrator.ui.review_prompt import ReviewPrompt
from orchestrator.ui.terminal_input import LineReader
from orchestrator.untrusted_text import as_data

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

__all__ = [
    "TerminalApprover",
    "answered_elsewhere",
    "chain_text",
    "choices_text",
    "describe_answer",
    "render_question",
]

log = logging.getLogger(__name__)

PANEL_FRAME_COLUMNS = 4
"""Columns the panel's border and padding take from the terminal's width."""


class TerminalApprover:
    """Asks a person on a TTY: allow once, allow for the session, or deny with a reason.

    Answers are `terminal:USER` (the OS user). A question answered on another channel
    meanwhile (the page, a webhook) is withdrawn: its prompt is cancelled, the hub's
    `withdraw` says who answered, and a line typed for it is not taken as the answer
    to the next question."""

    name = "terminal"

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user: str | None = None,
        table: Callable[[], RenderableType] | None = None,
    ) -> None:
        self._lines = LineReader(stdin or sys.stdin)
        self._out = stdout or sys.stdout
        self._user = user if user is not None else _os_user()
        self._table = table
        """The live task table, redrawn under the prompt while it waits (None: none)."""
        self._lock = asyncio.Lock()  # one prompt at a time; other subagents keep running
        self._width = DEFAULT_WIDTH
        self._prompter: Prompter | None = None

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        async with self._lock:
            try:
                if isinstance(q, ApplyReview):
                    return await self._review(q)
                return await self._ask(q)
            except asyncio.CancelledError:
                self._lines.withdrawn()  # what was typed for this prompt answers nothing else
                raise

    def withdraw(self, question_id: str, answer: ApprovalAnswer) -> None:
        """The question was answered on another channel: say so, by whom."""
        self.note(f"\n{answered_elsewhere(answer)}")

    def _answer(
        self,
        behavior: FinalBehavior,
        scope: AnswerScope = "once",
        reason: str = "",
    ) -> ApprovalAnswer:
        return ApprovalAnswer(
            behavior=behavior, scope=scope, reason=reason, channel="terminal", person=self._user
        )

    async def _review(self, q: ApplyReview) -> ApprovalAnswer:
        """An apply review: the paged diff, then yes or no bound to its hash."""
        from rich.console import Console

        console = Console(file=self._out, highlight=False, emoji=False, markup=False)
        prompter = PlainPrompt(self._out, console)
        review = ReviewPrompt(
            self._lines,
            self._out,
            self._user,
            paged=stays_live(self._out, self._lines),
            height=console.height,
            width=console.width,
        )
        self._prompter = prompter
        try:
            return await review.ask(q, console, prompter)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a display failure is a no, saying so
            return _display_failed(exc, self._user)
        finally:
            self._prompter = None

    async def _ask(self, q: ApprovalQuestion) -> ApprovalAnswer:
        """Show the question, then read answers. A display failure never becomes a
        silent deny: the prompt falls back to plain writes, and only when even those
        fail is the call denied, with a reason that says so."""
        try:
            prompter = await asyncio.to_thread(self._show_rich, q)
        except Exception as exc:  # a rendering bug must not cost the user the question
            log.warning("approval panel could not be drawn (%s); asking in plain text", exc)
            try:
                prompter = self._show_plain(q)
            except Exception as plain_exc:
                return _display_failed(plain_exc, self._user)
        self._prompter = prompter
        try:
            return await self._answers(q, prompter)
        finally:
            self._prompter = None
            prompter.close()

    async def _read(self, prompter: Prompter, label: Text) -> str | None:
        """Ask `label`, return the line typed ('' at end of input; None: the display
        failed)."""
        # The cut-off for what a withdrawn prompt's typing may answer is set before
        # this one is drawn: a person who answers the moment it appears (a key read
        # between the drawing and the cut-off) is not taken for typing meant for it.
        self._lines.prompt_shown()
        try:
            prompter.ask(label)
        except Exception as exc:
            log.error("the approval prompt could not be shown: %r", exc)
            return None
        line = await self._lines.readline()
        prompter.answered(label, line)
        return line

    async def _answers(self, q: ApprovalQuestion, prompter: Prompter) -> ApprovalAnswer:
        from rich.text import Text

        choices = Text.assemble(("[a]", "bold"), choices_text(q).removeprefix("[a]"))
        while True:
            line = await self._read(prompter, choices)
            if line is None:
                return _display_failed(RuntimeError("prompt"), self._user)
            if not line:
                return self._answer(behavior="deny", reason="no answer (end of input)")
            choice = line.strip().lower()
            if choice in ("a", "allow"):
                return self._answer(behavior="allow", scope="once")
            if choice in ("s", "session"):
                return self._answer(behavior="allow", scope="session")
            if choice in ("w", "always") and q.always_rule:
                confirm = Text(
                    f"Always allow: add the rule {as_data(q.always_rule)} to "
                    f"{as_data(q.always_file)}? [y/N] "
                )
                if ((await self._read(prompter, confirm)) or "").strip().lower() in ("y", "yes"):
                    return self._answer(behavior="allow", scope="always")
                continue
            if choice in ("v", "view"):
                prompter.write(render_full_input(q, self._width) + "\n")
                continue
            if choice in ("d", "deny"):
                asked = Text("Reason (told to the agent): ")
                reason = ((await self._read(prompter, asked)) or "").strip()
                return self._answer(behavior="deny", reason=reason or "denied by the user")

    def _show_rich(self, q: ApprovalQuestion) -> Prompter:
        from rich.console import Console
        from rich.panel import Panel
        from rich.text import Text

        console = Console(file=self._out, highlight=False, emoji=False, markup=False)
        self._width = max(console.width - PANEL_FRAME_COLUMNS, 1)
        # Text, never a markup string: the question carries container text. Lines are
        # already wrapped to fit, so the panel never wraps agent text off its quote bar.
        console.print(Panel(Text(render_question(q, self._width)), title="warden: approval needed"))
        if self._table is not None and stays_live(self._out, self._lines):
            return LivePrompt(console, self._lines, self._table)
        return PlainPrompt(self._out, console)

    def _show_plain(self, q: ApprovalQuestion) -> Prompter:
        self._width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
        self._write(f"warden: approval needed\n{render_question(q, self._width)}\n")
        return PlainPrompt(self._out, None)

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def note(self, text: str) -> None:
        """A line around the prompt (queue length, the answer given); never fails."""
        try:
            if self._prompter is not None:  # above the live prompt, which holds the line
                self._prompter.write(text.lstrip("\n") + "\n")
            else:
                self._write(text + "\n")
        except Exception:
            log.warning("could not write to the terminal: %s", text)


def describe_answer(q: ApprovalQuestion, answer: ApprovalAnswer) -> str:
    """The answer echoed back in one line, e.g. `denied Bash for sa_… (bash): reason`."""
    reason = f": {as_data(answer.reason)}" if answer.behavior == "deny" and answer.reason else ""
    if isinstance(q, ApplyReview):
        what = "approved" if answer.behavior == "allow" else "rejected"
        return (
            f"warden: {what} change set {q.change_set.sha256[:16]}… of {as_data(q.task_id)} "
            f"({as_data(q.agent_type)}){reason}"
        )
    if answer.behavior == "deny":
        what = "denied"
    elif answer.scope == "always" and q.always_rule:
        what = f"always allowed (rule {as_data(q.always_rule)} for {as_data(q.always_file)})"
    elif answer.scope in ("session", "always"):
        what = "allowed this exact input for the rest of this run"
    else:
        what = "allowed once"
    return f"warden: {what}: {as_data(q.tool_name)} for {as_data(q.task_id)} ({as_data(q.agent_type)}){reason}"


PLAIN_CHOICES = (
    "[a]llow once  [s] allow this exact input again for the rest of this run  "
    "[v]iew the whole input  [d]eny > "
)


def choices_text(q: ApprovalQuestion) -> str:
    """The answers offered; "always allow" only when an exact rule exists."""
    if not q.always_rule:
        return PLAIN_CHOICES
    return PLAIN_CHOICES.replace(
        "  [d]eny",
        f"\n  [w] always allow: add {as_data(q.always_rule)} to {as_data(q.always_file)}  [d]eny",
    )


def answered_elsewhere(answer: ApprovalAnswer) -> str:
    """One line for a question another channel answered: where, by whom, what."""
    what = "allowed" if answer.behavior == "allow" else "denied"
    reason = f": {as_data(answer.reason)}" if answer.behavior == "deny" and answer.reason else ""
    if not answer.person:  # warden itself: a timeout, a stopping run
        return f"warden: {what} ({as_data(answer.decided_by)}){reason}"
    where, who = as_data(answer.channel or answer.decided_by), as_data(answer.person)
    return f"warden: answered on {where} by {who}: {what}{reason}"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry (a bare container)
        return "unknown"


def _display_failed(exc: Exception, user: str) -> ApprovalAnswer:
    log.error("the approval prompt could not be shown: %r", exc)
    return ApprovalAnswer(
        behavior="deny",
        reason=(
            f"the approval prompt could not be shown on the terminal (display failed: "
            f"{type(exc).__name__}), so the call is denied; nobody saw it"
        ),
        channel="terminal",
        person=user,
    )
