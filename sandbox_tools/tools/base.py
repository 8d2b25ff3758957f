"""What every tool receives and returns.

Named tuples rather than dataclasses: `dataclasses` imports `inspect` (and with it
about twenty modules), a noticeable share of the runner's start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class ToolContext(NamedTuple):
    """Where tools run and their defaults."""

    root: Path
    """The workspace root, already resolved (no symlinks)."""
    bash_timeout_s: float = 120.0
    """Timeout of a Bash call that does not give one."""


class ToolOutput(NamedTuple):
    """A tool's answer to the model."""

    text: str
    is_error: bool = False
    summary: str = ""
    """One short line for progress events (e.g. `exit 0`); empty when nothing to add."""


BASH_DETAIL_CHARS = 120
"""Longest command shown in a progress event."""


def one_line(text: str, limit: int) -> str:
    """`text` on one line (runs of whitespace become one space), cut to `limit`."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


BINARY_SNIFF_BYTES = 8192
"""How much of a file is inspected for NUL bytes to tell binary from text."""


def looks_binary(head: bytes) -> bool:
    """A file whose first bytes contain NUL is treated as binary (like grep and git)."""
    return b"\0" in head


def truncation_note(what: str, shown: int, total: int | None, hint: str = "") -> str:
    """The uniform line that announces truncated output."""
    of_total = f" of {total}" if total is not None else ""
    tail = f"; {hint}" if hint else ""
    return f"[output truncated: showing {shown}{of_total} {what}{tail}]"
