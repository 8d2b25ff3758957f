"""Live progress of a run: a table of subagents on a terminal, one line per
event otherwise, JSON lines with --json.

Every field of an event may carry container text (agent names come from
workspace files, tool details from the sandbox), so each is shown through
`orchestrator.untrusted_text`: never as markup, controls escaped. The display
is also never allowed to take an approval down with it: a failure to draw is
logged, the live table is switched off, and the run (and its questions) go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from orchestrator.results.models import TASK_END_KINDS, Event
from orchestrator.results.todos import TODOS_EVENT, todo_count, todo_lines
from orchestrator.untrusted_text import DETAIL_CHARS, plain, printable

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.text import Text

    from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion, Approver

log = logging.getLogger(__name__)

__all__ = ["DETAIL_CHARS", "Progress", "printable"]


@dataclass
class TaskRow:
    task_id: str
    agent_type: str
    description: str
    status: str
    started: float
    tool: str = ""
    ended: float | None = None
    parent_id: str | None = None
    background: bool = False
    denials: int = 0
    todos: str = ""
    """The latest todo list, in one line (`2/5 done: [>] Running tests`)."""


class Progress:
    """An event listener that renders what subagents are doing."""

    def __init__(
        self, *, json_mode: bool, events: bool = True, stream: IO[str] | None = None
    ) -> None:
        self.json_mode = json_mode
        self.events = events
        """In JSON mode: print each event as a JSON line (False: only the result follows)."""
        self.stream = stream or (sys.stdout if json_mode else sys.stderr)
        self.rows: dict[str, TaskRow] = {}
        self.live: Live | None = None
        self.console: Console | None = None
        self._table_failed = False
        self._blank = False
        """Set while a Live stops: its last frame draws nothing."""
        if not json_mode and self.stream.isatty():
            from rich.console import Console

            self.console = Console(file=self.stream)

    def _start_live(self) -> None:
        """A new Live for every stretch of drawing: a restarted one would first erase
        as many lines as its last frame had, taking the prompt printed since with it."""
        from rich.live import Live

        # Transient: the table is erased when it stops (for a question or at the
        # end), so no stale copies are left above the prompt or the summary.
        self._blank = False
        live = self.live = Live(
            console=self.console,
            refresh_per_second=4,
            get_renderable=self._frame,
            transient=True,
        )
        live.start()

    def _frame(self) -> RenderableType:
        return _nothing() if self._blank else self._table()

    def _stop_live(self) -> None:
        live, self.live = self.live, None
        if live is None:
            return
        # The last frame draws nothing: a table taller than the screen could not be
        # erased once its top had scrolled away.
        self._blank = True
        live.stop()

    def __enter__(self) -> Progress:
        self.resume()
        return self

    def __exit__(self, *exc: object) -> None:
        self.pause()

    def prompt_table(self) -> Callable[[], RenderableType] | None:
        """The task table for the approval prompt to keep drawing under itself while
        it waits (None when this display draws no table: JSON, no terminal)."""
        return self._table if self.console is not None else None

    def pausing(self, approver: Approver) -> Approver:
        """Wrap an approver so the live table stops redrawing while it asks."""
        return _PausingApprover(approver, self)

    def pause(self) -> None:
        if self.live is not None:
            try:
                self._stop_live()
            except Exception:
                self._drop_live()

    def resume(self) -> None:
        if self.console is not None and self.live is None:
            try:
                self._start_live()
            except Exception:
                self._drop_live()

    def _drop_live(self) -> None:
        """The live table failed to draw: say so once and go on with plain lines."""
        log.exception("the live display failed; falling back to one line per event")
        live, self.live, self.console = self.live, None, None
        if live is not None:
            with contextlib.suppress(Exception):
                live.stop()

    def __call__(self, event: Event) -> None:
        self._track(event)
        if self.json_mode:
            if self.events:
                self.stream.write(event.model_dump_json() + "\n")
                self.stream.flush()
        elif self.console is None:  # no terminal (or it failed): one line per event
            line = self._line(event)
            if line:
                self.stream.write(line + "\n")
                self.stream.flush()

    def _track(self, event: Event) -> None:
        if event.task_id is None:
            return
        row = self.rows.get(event.task_id)
        if event.kind == "task_started" or row is None:
            row = self.rows.setdefault(
                event.task_id,
                TaskRow(
                    event.task_id,
                    event.agent_type or "?",
                    str(event.data.get("description", "")),
                    "running",
                    event.ts,
                ),
            )
        if event.kind == "task_started":
            row.parent_id = event.parent_id
            row.background = bool(event.data.get("background"))
        elif event.kind == "permission_denied":
            row.denials += 1
        elif event.kind == TODOS_EVENT:
            row.todos = _todo_line(event)
        if event.kind == "task_running":
            if event.data.get("event") == "tool_started":
                row.tool = f"{event.data.get('tool_name')}: {event.data.get('detail', '')}"
            elif event.data.get("event") == "tool_finished":
                row.tool = ""
            elif event.data.get("event") == "model_text":  # its own words, streamed
                row.tool = f"says: {' '.join(str(event.data.get('detail', '')).split())[-200:]}"
        elif event.kind in TASK_END_KINDS:
            row.status = str(event.data.get("status", event.kind.removeprefix("task_")))
            row.tool = ""
            row.ended = event.ts

    def _line(self, event: Event) -> str | None:
        data = event.data
        who = f"[{printable(event.task_id, 40)} {printable(event.agent_type, 40)}]"
        if event.kind == "task_started":
            how = [
                *(["background"] if data.get("background") else []),
                *([f"under {printable(event.parent_id, 40)}"] if event.parent_id else []),
            ]
            extra = f" ({', '.join(how)})" if how else ""
            return f"{who} started{extra}: {printable(data.get('description', ''))}"
        if event.kind == "task_running" and data.get("event") == "tool_started":
            return (
                f"{who} {printable(data.get('tool_name'), 40)}: {printable(data.get('detail', ''))}"
            )
        if event.kind == "task_running" and data.get("event") == "model_text":
            return f"{who} says: {printable(data.get('detail', ''), 300)}"
        if event.kind in TASK_END_KINDS:
            status = printable(data.get("status", event.kind.removeprefix("task_")), 40)
            extra = printable(data.get("error") or "", 200)
            return f"{who} {status} in {printable(data.get('duration_s'), 20)} s {extra}".rstrip()
        if event.kind == "permission_denied":
            return (
                f"{who} denied {printable(data.get('tool_name'), 40)} "
                f"({printable(data.get('decided_by'), 80)}): {printable(data.get('reason', ''), 200)}"
            )
        if event.kind == TODOS_EVENT:
            return f"{who} todos {printable(_todo_line(event), 300)}"
        if event.kind == "broker_rejected":
            endpoint = printable(data.get("endpoint"), 60)
            return (
                f"{who} rejected a request to {endpoint}: {printable(data.get('reason', ''), 200)}"
            )
        return None

    def _table(self) -> RenderableType:
        try:
            return self._draw_table()
        except Exception as exc:  # the refresh thread must never die on a bad row
            if not self._table_failed:
                log.warning("could not draw the subagent table: %r", exc)
            self._table_failed = True
            return plain(f"(subagent table unavailable: {type(exc).__name__})")

    def _draw_table(self) -> RenderableType:
        from rich.table import Table

        from orchestrator.results.summary import INDENT, tree_order

        table = Table(title="subagents", expand=False)
        for column in ("task", "agent", "status", "denied", "current tool", "elapsed"):
            table.add_column(column, no_wrap=True)
        now = time.time()
        rows = {r.task_id: r for r in self.rows.values()}
        for level, node in tree_order(list(rows.values())):
            row = rows[node.task_id]
            elapsed = (row.ended or now) - row.started
            label = plain(
                f"{INDENT * level}{row.task_id}{' (background)' if row.background else ''} "
            )
            label.append_text(plain(row.description, 40, style="dim"))
            table.add_row(
                label,
                plain(row.agent_type, 30),
                plain(row.status, 20),
                str(row.denials) if row.denials else "",
                plain(row.tool or row.todos, DETAIL_CHARS),
                f"{elapsed:5.1f}s",
            )
        return table


def _todo_line(event: Event) -> str:
    """A todo list event in one line: its count and the first open item."""
    first = todo_lines(event.data, limit=1)
    return f"{todo_count(event.data)}: {first[0]}" if first else todo_count(event.data)


def _nothing() -> Text:
    from rich.text import Text

    return Text("")


class _PausingApprover:
    """One question at a time with the live table stopped; says how many more wait
    and echoes each answer, so a person answering several knows where they are."""

    def __init__(self, inner: Approver, progress: Progress) -> None:
        self.inner = inner
        self.progress = progress
        self._lock = asyncio.Lock()
        self.waiting = 0
        self.name = getattr(inner, "name", "terminal")

    def withdraw(self, question_id: str, answer: ApprovalAnswer) -> None:
        """Another channel answered: the inner prompt says so (the live table is
        already stopped when the question is on screen or waiting behind one)."""
        withdraw = getattr(self.inner, "withdraw", None)
        if withdraw is None:
            return
        drawing = self.progress.live is not None
        if drawing:
            self.progress.pause()
        try:
            withdraw(question_id, answer)
        finally:
            if drawing:
                self.progress.resume()

    async def approve(self, question: ApprovalQuestion) -> ApprovalAnswer:
        from orchestrator.ui.approval_prompt import describe_answer

        self.waiting += 1
        if self._lock.locked():  # a question is on screen: say at once that this one waits
            # On a new line: the one on screen ends with its choices, awaiting an answer.
            self._note(f"\nwarden: {self.waiting} more question(s) waiting after this one")
        asking = False
        try:
            async with self._lock:
                self.waiting, asking = self.waiting - 1, True
                self.progress.pause()
                try:
                    if self.waiting:
                        self._note(
                            f"warden: {self.waiting} more question(s) waiting after this one"
                        )
                    answer = await self.inner.approve(question)
                    # Questions that arrived while this one was on screen are told now.
                    behind = f" ({self.waiting} more waiting)" if self.waiting else ""
                    self._note(describe_answer(question, answer) + behind)
                    return answer
                finally:
                    self.progress.resume()
        finally:
            if not asking:  # cancelled while waiting its turn
                self.waiting -= 1

    def _note(self, text: str) -> None:
        note = getattr(self.inner, "note", None)
        if note is not None:
            note(text)
