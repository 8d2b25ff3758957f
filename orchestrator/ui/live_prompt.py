"""How the terminal prompt reads an answer: `LivePrompt` keeps the task table
redrawing below the prompt while it waits (a real terminal, both ways), `PlainPrompt`
writes the prompt and reads a line (anything else: a pipe, a file, a failed display).

The live prompt owns the screen's bottom: the question panel is printed above it once
(it scrolls like any output, never cut), then a rich `Live` region holds the prompt
line with what is being typed (cbreak mode, see `terminal_input`) and, under it, the
subagent table, redrawn four times a second. Each answered step is printed above the
region as a plain line (`[a]llow once ... > a`), so the scrollback reads as before;
the region is erased when the prompt ends.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Protocol, TextIO

from orchestrator.ui.terminal_input import LineReader

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.text import Text

REFRESHES_PER_SECOND = 4
"""How often the table under a waiting prompt is redrawn."""


class Prompter(Protocol):
    def ask(self, label: Text) -> None:
        """Show `label` as the prompt line; what is typed next answers it."""

    def answered(self, label: Text, line: str) -> None:
        """The prompt was answered with `line`: leave the pair on screen."""

    def write(self, text: str) -> None:
        """Print text above the prompt."""

    def close(self) -> None:
        """Put the terminal back."""


class PlainPrompt:
    """The prompt is written where the cursor is; the terminal echoes typing."""

    def __init__(self, out: TextIO, console: Console | None) -> None:
        self._out = out
        self._console = console

    def ask(self, label: Text) -> None:
        if self._console is not None:
            self._console.print(label, end="")
        else:
            self.write(label.plain)

    def answered(self, label: Text, line: str) -> None:
        pass  # the terminal echoed it

    def write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def close(self) -> None:
        pass


class LivePrompt:
    """The prompt line and the live task table under it, redrawn while it waits."""

    def __init__(
        self, console: Console, lines: LineReader, table: Callable[[], RenderableType]
    ) -> None:
        from rich.live import Live

        self._console = console
        self._lines = lines
        self._table = table
        self._label: Text | None = None
        self._stack = ExitStack()
        self._live: Live = Live(
            console=console,
            get_renderable=self._frame,
            refresh_per_second=REFRESHES_PER_SECOND,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._stack.enter_context(lines.keys())
        lines.on_typing = self._live.refresh
        self._stack.callback(setattr, lines, "on_typing", None)
        self._live.start()
        self._stack.callback(self._live.stop)

    def _frame(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        line = Text()
        if self._label is not None:
            line.append_text(self._label)
            line.append(self._lines.typed)
            line.append(" ", style="reverse")  # the cursor: Live hides the real one
        try:
            table = self._table()
        except Exception as exc:  # the prompt must survive a table that cannot draw
            table = Text(f"(subagent table unavailable: {type(exc).__name__})")
        return Group(line, Text(""), table)

    def ask(self, label: Text) -> None:
        self._label = label
        self._live.refresh()

    def answered(self, label: Text, line: str) -> None:

        self._label = None
        shown = label.copy()
        shown.append(line.rstrip("\n"))
        self._live.console.print(shown)
        self._live.refresh()

    def write(self, text: str) -> None:
        from rich.text import Text

        self._live.console.print(Text(text), end="")

    def close(self) -> None:
        self._stack.close()


def stays_live(out: TextIO, lines: LineReader) -> bool:
    """Whether the live prompt can run: a terminal both ways."""
    try:
        return out.isatty() and lines.terminal_fd is not None
    except (AttributeError, OSError, ValueError):
        return False
