"""The end-of-run summary table: tasks as a tree with status, duration, tokens (and the
share of input read from the prompt cache), tool calls, denials and files changed (from the workspace, Bash writes included; marked
`shared` when other tasks ran at the same time). Every container-originated cell is plain text
(`untrusted_text.plain`), never markup."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Protocol, TypeVar

from orchestrator.results.models import RunResult, TaskSummary, TokenUsage
from orchestrator.untrusted_text import plain

if TYPE_CHECKING:
    from rich.table import Table

INDENT = "  "
WIDE_CONSOLE = 200
"""Width used when stderr is not a terminal, so piped output is not wrapped at 80."""


class _Node(Protocol):
    task_id: str
    parent_id: str | None


N = TypeVar("N", bound=_Node)


def tree_order(tasks: list[N]) -> Iterator[tuple[int, N]]:
    """(level, task) depth first, children under their parent in creation order; a
    task whose parent is not in the list is shown at the top level."""
    known = {t.task_id for t in tasks}
    children: dict[str | None, list[N]] = {}
    for task in tasks:
        key = task.parent_id if task.parent_id in known else None
        children.setdefault(key, []).append(task)

    def walk(parent: str | None, level: int) -> Iterator[tuple[int, N]]:
        for task in children.get(parent, []):
            yield level, task
            yield from walk(task.task_id, level + 1)

    yield from walk(None, 0)


def files_cell(task: TaskSummary) -> str:
    """Files changed: `3`, `3 shared` (other tasks ran meanwhile), `3+` (scan cut short),
    `-` when not measured."""
    if task.files_attribution == "unknown":
        return str(len(task.files_written)) if task.files_written else "-"
    more = "+" if task.files_scan_truncated else ""
    shared = " shared" if task.files_attribution == "shared" else ""
    return f"{task.files_changed_count}{more}{shared}"


def cached_cell(usage: TokenUsage) -> str:
    """The share of input tokens read from the prompt cache: `87%`, `-` without input."""
    return "-" if usage.cache_hit_share is None else f"{usage.cache_hit_share:.0%}"


def summary_table(result: RunResult) -> Table:
    from rich.table import Table

    table = Table(title=f"run {result.run_id or '-'}: {result.status}", title_justify="left")
    columns = ("task", "agent", "status", "time", "tokens", "cached", "tools", "denied", "files")
    for column in columns:
        table.add_column(column, no_wrap=column != "task")
    table.add_row(
        "run (parent agent, totals)", "-", plain(result.status, 20), f"{result.duration_s:.1f}s",
        str(result.tokens + result.parent_tokens),
        cached_cell(result.usage + result.parent_usage), "-", str(len(result.denials)), "-",
    )  # fmt: skip
    for level, task in tree_order(result.tasks):
        label = plain(f"{INDENT * (level + 1)}{task.task_id} ", 60)
        label.append_text(plain(task.description, 40, style="dim"))
        table.add_row(
            label,
            plain(task.agent_type, 30),
            plain(task.status, 20),
            "-" if task.duration_s is None else f"{task.duration_s:.1f}s",
            str(task.tokens),
            cached_cell(task.usage),
            str(task.tool_calls),
            str(task.denials),
            files_cell(task),
        )
    return table


def print_summary(result: RunResult, stream: IO[str] | None = None) -> None:
    """The table on `stream` (stderr): coloured on a terminal, unwrapped when piped."""
    from rich.console import Console

    stream = stream or sys.stderr
    tty = stream.isatty()
    console = Console(
        file=stream, highlight=False, no_color=not tty, width=None if tty else WIDE_CONSOLE
    )
    console.print(summary_table(result))
