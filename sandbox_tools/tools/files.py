"""The file tools: Read, Write, Edit. Every path goes through `confine`; Write and
Edit change a file through `replace`, which never leaves it worse than it was."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from sandbox_tools.errors import ToolError
from sandbox_tools.paths import confine
from sandbox_tools.tools.base import (
    BINARY_SNIFF_BYTES,
    ToolContext,
    ToolOutput,
    looks_binary,
    truncation_note,
)
from sandbox_tools.tools.inputs import EditInput, ReadInput, WriteInput
from sandbox_tools.tools.replace import fs_error, replace

READ_DEFAULT_LINE_LIMIT = 2000
"""Lines Read returns when the call gives no limit."""

READ_MAX_LINE_CHARS = 2000
"""Longer lines are cut and marked."""

READ_OUTPUT_LIMIT = 100_000
"""Most characters one Read returns; the rest is announced with the offset to continue."""

READ_MAX_WHOLE_FILE_BYTES = 256 * 1024
"""A bigger file must be read in parts (offset/limit) or searched with Grep."""

EDIT_MAX_FILE_BYTES = 10 * 1024 * 1024
"""Largest file Edit loads into memory."""

EDIT_SNIPPET_CONTEXT_LINES = 3
"""Lines shown around the first replacement after an Edit."""

EDIT_SNIPPET_MAX_LINES = 30
"""Most lines of that snippet."""

LINE_CUT_MARK = "… [line truncated]"


def _fs_error(op: str, shown: str, e: OSError) -> ToolError:
    return fs_error(op, shown, e, unchanged=None)


def _stat_regular(path: Path, shown: str) -> os.stat_result:
    """The file's stat; a clear ToolError when it is missing, a directory or special."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ToolError(f"file does not exist: {shown}") from None
    except OSError as e:
        raise _fs_error("access", shown, e) from e
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory, not a file; use Glob or Bash `ls` to list it")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file")
    return st


def _open(path: Path, flags: int, shown: str, op: str) -> int:
    # O_NOFOLLOW: the path was resolved by confine; refuse a symlink swapped in since.
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise _fs_error(op, shown, e) from e


def _numbered(lineno: int, text: str) -> str:
    if len(text) > READ_MAX_LINE_CHARS:
        text = text[:READ_MAX_LINE_CHARS] + LINE_CUT_MARK
    return f"{lineno:6d}\t{text}"


def _lines(f: BinaryIO) -> Iterator[str]:
    """Decoded lines without their newline; a huge line never sits whole in memory."""
    cap = READ_MAX_LINE_CHARS * 4 + 4  # UTF-8 is at most 4 bytes a character
    while True:
        chunk = f.readline(cap)
        if not chunk:
            return
        if not chunk.endswith(b"\n"):
            rest = chunk
            while rest and not rest.endswith(b"\n"):  # skip the rest of a long line
                rest = f.readline(cap)
        yield chunk.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")


def read(inp: ReadInput, ctx: ToolContext) -> ToolOutput:
    path = confine(inp.file_path, ctx.root)
    shown = str(path)
    st = _stat_regular(path, shown)
    if st.st_size > READ_MAX_WHOLE_FILE_BYTES and inp.offset is None and inp.limit is None:
        raise ToolError(
            f"{shown} is {st.st_size} bytes, more than {READ_MAX_WHOLE_FILE_BYTES} bytes can be "
            "read at once; read a part with offset and limit, or search it with Grep"
        )
    start = max(inp.offset or 1, 1)
    limit = inp.limit or READ_DEFAULT_LINE_LIMIT
    with os.fdopen(_open(path, os.O_RDONLY, shown, "read"), "rb") as f:
        if looks_binary(f.read(BINARY_SNIFF_BYTES)):
            raise ToolError(f"{shown} is a binary file; Read only shows text files")
        f.seek(0)
        out: list[str] = []
        size = 0
        lineno = 0
        more = False
        for lineno, text in enumerate(_lines(f), start=1):
            if lineno < start:
                continue
            entry = _numbered(lineno, text)
            if len(out) >= limit or size + len(entry) + 1 > READ_OUTPUT_LIMIT:
                more = True
                break
            out.append(entry)
            size += len(entry) + 1
    if not out:
        if lineno == 0:
            return ToolOutput(f"(the file {shown} exists but is empty)", summary="empty")
        return ToolOutput(
            f"(the file {shown} has {lineno} lines; offset {start} is past its end)",
            summary="past end",
        )
    text = "\n".join(out)
    last = start + len(out) - 1
    if more:
        hint = f"call Read with offset={last + 1} to continue"
        text += "\n" + truncation_note("lines", len(out), None, hint)
    return ToolOutput(text, summary=f"lines {start}-{last}")


def write(inp: WriteInput, ctx: ToolContext) -> ToolOutput:
    path = confine(inp.file_path, ctx.root)
    shown = str(path)
    try:
        old: os.stat_result | None = path.stat()
    except FileNotFoundError:
        old = None
    except OSError as e:
        raise _fs_error("access", shown, e) from e
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise ToolError(f"{shown} is a directory; give a file path to write")
    if old is not None and not stat.S_ISREG(old.st_mode):  # a FIFO or device would block
        raise ToolError(f"{shown} is not a regular file; Write only replaces regular files")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _fs_error("create the parent directories of", shown, e) from e
    data = inp.content.encode("utf-8")
    note = replace(path, data, shown, old)
    existed = old is not None
    verb = "Overwrote" if existed else "Created"
    return ToolOutput(f"{verb} {shown} ({len(data)} bytes).{note}", summary=f"{len(data)} bytes")


def edit(inp: EditInput, ctx: ToolContext) -> ToolOutput:
    if inp.old_string == inp.new_string:
        raise ToolError("old_string and new_string are identical; there is nothing to change")
    if not inp.old_string:
        raise ToolError("old_string is empty; use Write to create or replace a whole file")
    path = confine(inp.file_path, ctx.root)
    shown = str(path)
    st = _stat_regular(path, shown)
    if st.st_size > EDIT_MAX_FILE_BYTES:
        raise ToolError(
            f"{shown} is {st.st_size} bytes, more than Edit handles ({EDIT_MAX_FILE_BYTES}); "
            "change it with Bash (e.g. sed) instead"
        )
    with os.fdopen(_open(path, os.O_RDONLY, shown, "read"), "rb") as f:
        data = f.read()
    if looks_binary(data[:BINARY_SNIFF_BYTES]):
        raise ToolError(f"{shown} is a binary file; Edit only changes text files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not valid UTF-8 text; change it with Bash instead") from None
    count = text.count(inp.old_string)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {shown}. It must match the file exactly, including "
            "whitespace and indentation; Read the file to see its current content"
        )
    if count > 1 and not inp.replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {shown}; add surrounding lines to make it "
            "unique, or set replace_all to true to replace every occurrence"
        )
    first = text.index(inp.old_string)
    new_text = text.replace(inp.old_string, inp.new_string, -1 if inp.replace_all else 1)
    note = replace(path, new_text.encode("utf-8"), shown, st)
    replaced = count if inp.replace_all else 1
    plural = "occurrence" if replaced == 1 else "occurrences"
    return ToolOutput(
        f"Edited {shown}: replaced {replaced} {plural}.{note} The first one now reads:\n"
        + _snippet(new_text, first, inp.new_string),
        summary=f"{replaced} {plural}",
    )


def _snippet(text: str, at: int, inserted: str) -> str:
    """Numbered lines around the text inserted at character offset `at`."""
    first_line = text.count("\n", 0, at) + 1
    last_line = first_line + inserted.count("\n")
    lo = max(first_line - EDIT_SNIPPET_CONTEXT_LINES, 1)
    hi = min(last_line + EDIT_SNIPPET_CONTEXT_LINES, lo + EDIT_SNIPPET_MAX_LINES - 1)
    lines = text.split("\n")[lo - 1 : hi]
    return "\n".join(_numbered(lo + i, line) for i, line in enumerate(lines))
