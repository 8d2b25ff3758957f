"""Live progress of a run: a table of subagents on a terminal, one line per
event otherwise, JSON lines with --json."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from orchestrator.events import Event
from orchestrator.permissions.approvers import as_data

DETAIL_CHARS = 60


@dataclass
class TaskRow:
    task_id: str
    agent_type: str
    description: str
    status: str
    started: float
    tool: str = ""
    ended: float | None = None


def printable(text: str, limit: int | None = DETAIL_CHARS, *, multiline: bool = False) -> str:
    """Container-originated text, made safe to show: control characters (ANSI
    escapes, carriage returns, bidi overrides) are escaped so they cannot redraw
    the terminal or fake a prompt."""
    out = as_data(text)
    if not multiline:
        out = out.replace("\n", "\\n")
    return out if limit is None or len(out) <= limit else out[: limit - 1] + "…"


class Progress:
    """An event listener that renders what subagents are doing."""

    def __init__(self, *, json_mode: bool, stream: IO[str] | None = None) -> None:
        self.json_mode = json_mode
        self.stream = stream or (sys.stdout if json_mode else sys.stderr)
        self.rows: dict[str, TaskRow] = {}
        self.live: Any = None
        self.console: Any = None
        if not json_mode and self.stream.isatty():
            from rich.console import Console
            from rich.live import Live

            self.console = Console(file=self.stream)
            self.live = Live(console=self.console, refresh_per_second=4, get_renderable=self._table)

    def __enter__(self) -> Progress:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def pausing(self, approver: Any) -> Any:
        """Wrap an approver so the live table stops redrawing while it asks."""
        return _PausingApprover(approver, self)

    def pause(self) -> None:
        if self.live is not None:
            self.live.stop()

    def resume(self) -> None:
        if self.live is not None:
            self.live.start()

    def __call__(self, event: Event) -> None:
        self._track(event)
        if self.json_mode:
            self.stream.write(event.model_dump_json() + "\n")
            self.stream.flush()
        elif self.live is None:
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
        if event.kind == "task_running":
            if event.data.get("event") == "tool_started":
                row.tool = f"{event.data.get('tool_name')}: {event.data.get('detail', '')}"
            elif event.data.get("event") == "tool_finished":
                row.tool = ""
        elif event.kind.startswith("task_") and event.kind not in ("task_started", "task_running"):
            row.status = str(event.data.get("status", event.kind.removeprefix("task_")))
            row.tool = ""
            row.ended = event.ts

    def _line(self, event: Event) -> str | None:
        who = f"[{event.task_id} {event.agent_type}]"
        if event.kind == "task_started":
            return f"{who} started: {printable(str(event.data.get('description', '')))}"
        if event.kind == "task_running" and event.data.get("event") == "tool_started":
            detail = printable(str(event.data.get("detail", "")))
            return f"{who} {event.data.get('tool_name')}: {detail}"
        if event.kind in ("task_completed", "task_failed", "task_timed_out", "task_stopped"):
            extra = event.data.get("error") or ""
            return f"{who} {event.data.get('status')} in {event.data.get('duration_s')} s {printable(str(extra), 200)}".rstrip()
        if event.kind == "broker_rejected":
            return f"{who} rejected a request to {event.data.get('endpoint')}: {printable(str(event.data.get('reason', '')), 200)}"
        return None

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title="subagents", expand=False)
        for column in ("task", "agent", "status", "current tool", "elapsed"):
            table.add_column(column)
        now = time.time()
        for row in self.rows.values():
            elapsed = (row.ended or now) - row.started
            table.add_row(
                row.task_id,
                row.agent_type,
                row.status,
                printable(row.tool),
                f"{elapsed:5.1f}s",
            )
        return table


class _PausingApprover:
    def __init__(self, inner: Any, progress: Progress) -> None:
        self.inner = inner
        self.progress = progress
        self._lock = asyncio.Lock()

    async def approve(self, question: Any) -> Any:
        async with self._lock:
            self.progress.pause()
            try:
                return await self.inner.approve(question)
            finally:
                self.progress.resume()
