"""An apply review on a terminal: the change set's diff, paged on a TTY (printed
whole otherwise), then yes or no, bound to the change set's hash.

The diff is `apply.render`'s (every name and line already made inert). Here it is
laid out for a terminal: lines are wrapped by warden, never by the terminal, and a
wrapped piece keeps its gutter (`┆`), so file content can never start a line of its
own and pass for warden's. The pager is warden's own and reads keys through the
prompt's `LineReader`: an external pager (`less`) would fight the prompt's reader
thread for the same terminal.

A yes is `ApprovalAnswer(behavior="allow", bound_to=SHA256)`, naming the hash in the
header the person read; apply refuses an answer bound to any other. The run's
terminal approver and `warden apply TASK` both review through `ReviewPrompt`
(`review_on_terminal` is the latter's): one pager, one set of keys and words.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, TextIO

from rich.cells import cell_len, chop_cells

from orchestrator.apply.render import GUTTER, ChangeSetView, RenderError, render_change_set
from orchestrator.untrusted_text import as_data, printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from orchestrator.apply.changeset import ApplyReview
    from orchestrator.permissions.approvers import ApprovalAnswer
    from orchestrator.ui.live_prompt import Prompter
    from orchestrator.ui.terminal_input import LineReader

PAGE_MIN_LINES = 5
"""Fewest diff lines on one page, however short the terminal."""
PAGE_RESERVED_LINES = 2
"""Terminal lines kept free under a page (the pager's prompt and what is typed)."""
MIN_PIECE_CELLS = 10
"""Narrowest piece of a wrapped line, however narrow the terminal."""
CONTINUED = "┆"
"""The gutter of a wrapped piece of a content line."""
MORE = "     ⋯ "
"""Starts a wrapped piece of one of warden's own lines (a long name, a note)."""

STYLES = {"+": "green", "-": "red", "@": "cyan", "!": "bold yellow", "─": "bold"}
"""Colours on a terminal, by what a line is (its text is already inert)."""

REVIEW_TITLE = "warden: review a subagent's changes before they reach the workspace"
REVIEW_CHOICES = "[y]es, apply it  [n]o  [v]iew the diff again > "


def screen_lines(view: ChangeSetView, width: int) -> list[tuple[str, str]]:
    """`(line, kind)` pairs fitting `width` cells: the review's text wrapped by warden,
    with a wrapped content line keeping its gutter. `kind` picks a colour."""
    out: list[tuple[str, str]] = []
    for line in view.text().rstrip("\n").split("\n"):
        out.extend(_wrap(line, width))
    return out


def _kind(line: str) -> str:
    stripped = line.lstrip(" ")
    if stripped.startswith(GUTTER):
        return stripped[1:2] if stripped[1:2] in "+-" else " "
    if stripped.startswith("@@"):
        return "@"
    return stripped[:1] if stripped[:1] in ("!", "─") else ""


_ESCAPE = re.compile(r"\\(?:u[0-9a-f]{4}|U[0-9a-f]{8}|x[0-9a-f]{2}|[tn\\])")
"""One of the escapes `untrusted_text` and `render` write: a wrap never splits one."""


def _chop(text: str, width: int) -> list[str]:
    """`text` in pieces of at most `width` cells, never splitting an escape."""
    pieces: list[str] = []
    while text:
        piece = chop_cells(text, width)[0]
        end = len(piece)
        if end < len(text):
            for match in _ESCAPE.finditer(text, max(end - 10, 0), end + 10):
                if match.start() < end < match.end() and match.start() > 0:
                    end = match.start()
                    break
        pieces.append(text[:end])
        text = text[end:]
    return pieces


def _wrap(line: str, width: int) -> list[tuple[str, str]]:
    kind = _kind(line)
    if cell_len(line) <= width:
        return [(line, kind)]
    stripped = line.lstrip(" ")
    if stripped.startswith(GUTTER):  # content: every piece behind a gutter
        indent = line[: len(line) - len(stripped)]
        mark = stripped[1:2]
        lead, rest, follow = indent + GUTTER + mark, stripped[2:], indent + CONTINUED + mark
    else:
        lead, rest, follow = "", line, MORE
    first = _chop(rest, max(width - cell_len(lead), MIN_PIECE_CELLS))[0]
    out = [(lead + first, kind)]
    if remaining := rest[len(first) :]:
        pieces = _chop(remaining, max(width - cell_len(follow), MIN_PIECE_CELLS))
        out.extend((follow + piece, kind) for piece in pieces)
    return out


def review_heading(q: ApplyReview) -> str:
    """Who asks, in words: the task, its agent and description (made inert)."""
    description = printable(q.description, 200)
    about = f": {description}" if description else ""
    return (
        f"Review: the changes of task {printable(q.task_id, 40)} "
        f"({printable(q.agent_type, 40)}){about}"
    )


class ReviewPrompt:
    """One apply review on a terminal (`TerminalApprover` hands it its reader, output
    and person)."""

    def __init__(
        self,
        lines: LineReader,
        out: TextIO,
        user: str,
        *,
        paged: bool,
        height: int,
        width: int,
        target: str = "the workspace",
        ask_reason: bool = True,
    ) -> None:
        self._lines = lines
        self._out = out
        self._user = user
        self._paged = paged
        self._page = max(height - PAGE_RESERVED_LINES, PAGE_MIN_LINES)
        self._width = width
        self._target = target
        """Where a yes applies it, in words (made inert by the caller)."""
        self._ask_reason = ask_reason
        """Whether a no asks why (told to the agent; `warden apply` has nobody to tell)."""

    def _answer(self, allow: bool, sha256: str, reason: str = "") -> ApprovalAnswer:
        from orchestrator.permissions.approvers import ApprovalAnswer

        return ApprovalAnswer(
            behavior="allow" if allow else "deny",
            reason=reason,
            channel="terminal",
            person=self._user,
            bound_to=sha256 if allow else "",
        )

    async def ask(self, q: ApplyReview, console: Console, prompter: Prompter) -> ApprovalAnswer:
        from rich.text import Text

        try:
            view = await asyncio.to_thread(render_change_set, q.change_set, q.content)
        except RenderError as exc:
            prompter.write(f"warden: {as_data(exc)}\n")
            return self._answer(False, "", f"the change set could not be shown: {exc}")
        console.print(Text(REVIEW_TITLE, style="bold"))
        prompter.write(review_heading(q) + "\n")
        lines = screen_lines(view, self._width)
        await self._show(lines, console, prompter)
        choices = Text(f"Apply change set {view.sha256[:16]}… to {self._target}? {REVIEW_CHOICES}")
        while True:
            line = await self._read(prompter, choices)
            if line is None or not line:
                return self._answer(False, "", "no answer (end of input)")
            choice = line.strip().lower()
            if choice in ("y", "yes"):
                return self._answer(True, view.sha256)
            if choice in ("n", "no"):
                if not self._ask_reason:
                    return self._answer(False, "", "the reviewer said no")
                asked = Text("Reason (told to the agent): ")
                reason = ((await self._read(prompter, asked)) or "").strip()
                return self._answer(False, "", reason or "the reviewer said no")
            if choice in ("v", "view"):
                await self._show(lines, console, prompter)

    async def _read(self, prompter: Prompter, label: Text) -> str | None:
        self._lines.prompt_shown()
        try:
            prompter.ask(label)
        except Exception:
            return None
        line = await self._lines.readline()
        prompter.answered(label, line)
        return line

    async def _show(
        self, lines: list[tuple[str, str]], console: Console, prompter: Prompter
    ) -> None:
        """Every line at once (not a terminal), or a page at a time: Enter shows the
        next, `q` stops (the question then says how much was not shown)."""
        from rich.text import Text

        at = 0
        while at < len(lines):
            end = len(lines) if not self._paged else min(at + self._page, len(lines))
            for text, kind in lines[at:end]:
                console.print(Text(text, style=STYLES.get(kind, "")), soft_wrap=True)
            at = end
            if at >= len(lines):
                return
            more = Text(
                f"-- lines 1-{at} of {len(lines)}: [Enter] next page, [q] stop and answer -- ",
                style="reverse",
            )
            line = await self._read(prompter, more)
            if line is None or not line or line.strip().lower() in ("q", "quit"):
                prompter.write(
                    f"warden: {len(lines) - at} lines of the review not shown "
                    "([v] shows it again from the start)\n"
                )
                return


async def review_on_terminal(
    q: ApplyReview, stdin: TextIO, out: TextIO, user: str, *, target: str
) -> ApprovalAnswer:
    """`warden apply TASK`'s review: the run's pager and question on this process's
    terminal (a no asks no reason: there is no agent to tell)."""
    from rich.console import Console

    from orchestrator.ui.live_prompt import PlainPrompt, stays_live
    from orchestrator.ui.terminal_input import LineReader

    lines = LineReader(stdin)
    console = Console(file=out, highlight=False, emoji=False, markup=False)
    review = ReviewPrompt(
        lines, out, user, paged=stays_live(out, lines), height=console.height,
        width=console.width, target=target, ask_reason=False,
    )  # fmt: skip
    return await review.ask(q, console, PlainPrompt(out, console))
