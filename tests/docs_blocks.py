"""The shell lines of warden's documentation: every fenced shell block of README.md,
docs/ and policies/README.md, with continuations joined, for the tests that hold the
documentation to what warden does (tests/unit/test_docs.py, tests/e2e/
test_docs_commands.py)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SHELL_FENCES = ("sh", "bash", "shell", "console")
"""Fences read as shell; in a fence with no language (diagrams, output) only lines that
start with `warden ` are."""
RUN_MARK = "<!-- docs-test: run -->"
"""Put on the line before a fenced block whose every line the e2e test runs."""
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_INLINE = re.compile(r"`(warden [^`]+)`")
SYNOPSIS_MARKS = ("[", "|", "...", "…", "{")
"""An inline span with one of these is a synopsis (optional parts, alternatives), not a
command line."""


@dataclass(frozen=True)
class ShellLine:
    path: Path
    line: int
    text: str
    run: bool
    """In a block marked RUN_MARK."""

    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def documents() -> list[Path]:
    docs = sorted((REPO_ROOT / "docs").rglob("*.md"))
    return [REPO_ROOT / "README.md", REPO_ROOT / "policies" / "README.md", *docs]


def shell_lines(path: Path) -> Iterator[ShellLine]:
    lines = path.read_text(encoding="utf-8").splitlines()
    inside, shell, run, pending, start = False, False, False, "", 0
    for number, raw in enumerate(lines, 1):
        fence = _FENCE.match(raw)
        if fence:
            if not inside:
                inside, shell = True, fence.group(2) in SHELL_FENCES
                run = number >= 2 and lines[number - 2].strip() == RUN_MARK
            else:
                inside = False
            continue
        text = raw.strip()
        if not inside:
            for span in _INLINE.findall(raw):
                if not any(mark in span for mark in SYNOPSIS_MARKS):
                    yield ShellLine(path, number, span, run=False)
            continue
        if not (shell or pending or text.startswith(("warden ", "$ warden "))):
            continue
        if text.startswith("$ "):
            text = text[2:]
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        text, pending = pending + text, ""
        if text and not text.startswith("#"):
            yield ShellLine(path, start, text, run)


def warden_argvs(line: ShellLine) -> Iterator[list[str]]:
    """The argument vectors of each `warden ...` command in a shell line (pipes, `&&`,
    `;` and redirections end a command; comments are dropped)."""
    lexer = shlex.shlex(line.text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    command: list[str] = []
    for word in [*words, ";"]:
        if word and set(word) <= set("|&;<>()"):
            if command and Path(command[0]).name == "warden":
                yield command[1:]
            command = []
            continue
        if not command and "=" in word and not word.startswith("-"):
            continue  # VAR=value before the command
        command.append(word)
