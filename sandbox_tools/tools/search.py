"""The search tools: Glob (file names) and Grep (file contents, Python `re`).

Both walk the tree with one walker that never follows directory symlinks,
skips version-control directories, lists a file symlink only when its target
stays in the workspace, and stops after `WALK_MAX_ENTRIES` entries.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_tools.errors import ToolError
from sandbox_tools.paths import confine
from sandbox_tools.tools.base import (
    BINARY_SNIFF_BYTES,
    ToolContext,
    ToolOutput,
    looks_binary,
    truncation_note,
)
from sandbox_tools.tools.inputs import GlobInput, GrepInput

GLOB_RESULT_LIMIT = 100
"""Most paths one Glob returns (newest first)."""

WALK_MAX_ENTRIES = 200_000
"""Most directory entries one Glob or Grep looks at."""

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
"""Directories the search tools do not descend into."""

GREP_RESULT_LIMIT = 250
"""Most lines (content mode) or entries (other modes) one Grep returns without head_limit."""

GREP_OUTPUT_LIMIT = 30_000
"""Most characters one Grep returns."""

GREP_MAX_LINE_CHARS = 1000
"""Longer lines in Grep output are cut and marked."""

GREP_MAX_FILE_BYTES = 10 * 1024 * 1024
"""Bigger files are skipped (and the skip is announced)."""

GREP_TIME_LIMIT_S = 60.0
"""Grep stops looking at further files after this long (and says so)."""

_MAGIC = re.compile(r"[*?\[{]")


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob (`*`, `?`, `[...]`, `**`, `{a,b}`) into a regex for `/`-separated paths."""
    out: list[str] = []
    i, n, depth = 0, len(pattern), 0
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        raise ToolError(f"glob pattern {pattern!r} has an unclosed '{{'")
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error as e:
        raise ToolError(f"invalid glob pattern {pattern!r}: {e}") from e


@dataclass
class _Walk:
    """Regular files under `base`, as (absolute path, path relative to base)."""

    base: Path
    root: Path
    scanned: int = 0
    cut_short: bool = False
    skipped: list[str] = field(default_factory=list)

    def files(self) -> Iterator[tuple[str, str]]:
        stack = [self.base]
        while stack:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                self.skipped.append(str(directory))
                continue
            for entry in entries:
                self.scanned += 1
                if self.scanned > WALK_MAX_ENTRIES:
                    self.cut_short = True
                    return
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in SKIPPED_DIRS:
                        stack.append(Path(entry.path))
                    continue
                if entry.is_symlink():
                    try:
                        target = confine(entry.path, self.root)
                    except ToolError:
                        continue
                    if not target.is_file():
                        continue
                elif not entry.is_file(follow_symlinks=False):
                    continue
                yield entry.path, os.path.relpath(entry.path, self.base)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _newest_first(paths: list[str]) -> list[str]:
    return sorted(paths, key=lambda p: (-_mtime(p), p))


def _search_dir(path: str | None, ctx: ToolContext) -> Path:
    base = confine(path or ".", ctx.root)
    if not base.is_dir():
        raise ToolError(f"{base} is not a directory" if base.exists() else f"{base} does not exist")
    return base


def glob(inp: GlobInput, ctx: ToolContext) -> ToolOutput:
    base = _search_dir(inp.path, ctx)
    # Leading literal components (e.g. `/workspace/src/**/*.py`, `../x/*`) move the base,
    # so they are confined like any other path.
    parts = inp.pattern.split("/")
    literal = 0
    while literal < len(parts) - 1 and not _MAGIC.search(parts[literal]):
        literal += 1
    if literal:
        prefix = "/".join(parts[:literal]) or "/"
        base = confine(str(base / prefix), ctx.root)
        if not base.is_dir():
            return ToolOutput(f"No files found ({base} is not a directory)", summary="0 files")
    rx = glob_to_regex("/".join(parts[literal:]))
    walk = _Walk(base, ctx.root)
    matches = [full for full, rel in walk.files() if rx.fullmatch(rel)]
    notes: list[str] = []
    if walk.cut_short:
        notes.append(f"[search stopped after {WALK_MAX_ENTRIES} entries; narrow path or pattern]")
    if not matches:
        return ToolOutput("\n".join(["No files found", *notes]), summary="0 files")
    ordered = _newest_first(matches)
    shown = ordered[:GLOB_RESULT_LIMIT]
    if len(ordered) > len(shown):
        notes.append(
            truncation_note("paths", len(shown), len(ordered), "use a more specific pattern")
        )
    return ToolOutput("\n".join([*shown, *notes]), summary=f"{len(ordered)} files")


def _cut(line: str) -> str:
    if len(line) > GREP_MAX_LINE_CHARS:
        return line[:GREP_MAX_LINE_CHARS] + "… [line truncated]"
    return line


def _content_lines(path: str, lines: list[str], hits: list[int], inp: GrepInput) -> list[str]:
    """ripgrep-style output: `path:N:line` for matches, `path-N-line` for context, `--` gaps."""
    before = inp.before if inp.before is not None else inp.context or 0
    after = inp.after if inp.after is not None else inp.context or 0
    hit_set = set(hits)
    out: list[str] = []
    last = -1
    for h in hits:
        lo, hi = max(h - before, last + 1), min(h + after, len(lines) - 1)
        if out and lo > last + 1:
            out.append("--")
        for i in range(lo, hi + 1):
            sep = ":" if i in hit_set else "-"
            number = f"{i + 1}{sep}" if inp.line_numbers else ""
            out.append(f"{path}{sep}{number}{_cut(lines[i])}")
        last = max(last, hi)
    return out


def grep(inp: GrepInput, ctx: ToolContext) -> ToolOutput:
    try:
        rx = re.compile(inp.pattern, re.IGNORECASE if inp.case_insensitive else 0)
    except re.error as e:
        raise ToolError(f"invalid regular expression {inp.pattern!r}: {e}") from e
    target = confine(inp.path or ".", ctx.root)
    if target.is_file():
        files: Iterator[tuple[str, str]] = iter([(str(target), target.name)])
        walk = None
    elif target.is_dir():
        walk = _Walk(target, ctx.root)
        files = walk.files()
    else:
        raise ToolError(f"{target} does not exist")
    name_rx = glob_to_regex(inp.glob) if inp.glob else None
    match_path = bool(inp.glob and "/" in inp.glob)
    limit = inp.head_limit or GREP_RESULT_LIMIT
    deadline = time.monotonic() + GREP_TIME_LIMIT_S

    entries: list[str] = []  # output lines (content) or matching paths / counts
    too_big: list[str] = []
    timed_out = False
    stopped_early = False  # content mode stops reading once it has more lines than it shows
    for full, rel in files:
        if name_rx and not name_rx.fullmatch(rel if match_path else os.path.basename(rel)):
            continue
        if time.monotonic() > deadline:
            timed_out = True
            break
        try:
            if os.path.getsize(full) > GREP_MAX_FILE_BYTES:
                too_big.append(full)
                continue
            with open(full, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if looks_binary(data[:BINARY_SNIFF_BYTES]):
            continue
        lines = data.decode("utf-8", errors="replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        hits = [i for i, line in enumerate(lines) if rx.search(line.rstrip("\r"))]
        if not hits:
            continue
        if inp.output_mode == "files_with_matches":
            entries.append(full)
        elif inp.output_mode == "count":
            entries.append(f"{full}:{len(hits)}")
        else:
            entries.extend(_content_lines(full, [ln.rstrip("\r") for ln in lines], hits, inp))
        if inp.output_mode == "content" and len(entries) > limit:
            stopped_early = True
            break

    if inp.output_mode == "files_with_matches":
        entries = _newest_first(entries)
    notes: list[str] = []
    if walk is not None and walk.cut_short:
        notes.append(f"[search stopped after {WALK_MAX_ENTRIES} entries; narrow the path]")
    if timed_out:
        notes.append(f"[search stopped after {GREP_TIME_LIMIT_S:g} s; results are partial]")
    if too_big:
        notes.append(
            f"[skipped {len(too_big)} files larger than {GREP_MAX_FILE_BYTES} bytes, "
            f"e.g. {too_big[0]}]"
        )
    if not entries:
        return ToolOutput("\n".join(["No matches found", *notes]), summary="0 matches")
    total = len(entries)
    shown = entries[:limit]
    text_lines: list[str] = []
    size = 0
    for line in shown:
        if size + len(line) + 1 > GREP_OUTPUT_LIMIT:
            break
        text_lines.append(line)
        size += len(line) + 1
    what = "lines" if inp.output_mode == "content" else "entries"
    if len(text_lines) < total:
        notes.append(
            truncation_note(
                what,
                len(text_lines),
                None if stopped_early else total,
                "narrow the search or raise head_limit",
            )
        )
    return ToolOutput("\n".join([*text_lines, *notes]), summary=f"{total} {what}")
