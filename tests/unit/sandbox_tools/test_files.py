"""The Read, Write and Edit tools: Claude Code's inputs, `cat -n` output, named
caps with announced truncation, clear refusals (missing, directory, binary,
huge, non-unique or absent old_string), and input validation errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_tools.tools import ToolContext, run_tool
from sandbox_tools.tools import files as f


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(root=tmp_path.resolve())


def test_read_numbers_lines_like_cat_n(ctx: ToolContext) -> None:
    (ctx.root / "a.txt").write_text("alpha\nbeta\r\ngamma")
    out = run_tool("Read", {"file_path": str(ctx.root / "a.txt")}, ctx)
    assert not out.is_error
    assert out.text == "     1\talpha\n     2\tbeta\n     3\tgamma"


def test_read_offset_and_limit(ctx: ToolContext) -> None:
    (ctx.root / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    out = run_tool("Read", {"file_path": "n.txt", "offset": 10, "limit": 3}, ctx)
    assert out.text.splitlines()[:3] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    assert "[output truncated: showing 3 lines; call Read with offset=13 to continue]" in out.text


def test_read_default_line_limit_is_announced(ctx: ToolContext) -> None:
    n = f.READ_DEFAULT_LINE_LIMIT + 5
    (ctx.root / "long.txt").write_text("x\n" * n)
    out = run_tool("Read", {"file_path": "long.txt"}, ctx)
    lines = out.text.splitlines()
    assert len(lines) == f.READ_DEFAULT_LINE_LIMIT + 1
    assert f"offset={f.READ_DEFAULT_LINE_LIMIT + 1}" in lines[-1]


def test_read_cuts_long_lines_and_caps_total_output(ctx: ToolContext) -> None:
    (ctx.root / "wide.txt").write_text(("y" * 50_000 + "\n") * 200)
    out = run_tool("Read", {"file_path": "wide.txt", "limit": 200}, ctx)
    first = out.text.splitlines()[0]
    assert first.endswith(f.LINE_CUT_MARK)
    assert len(first) < f.READ_MAX_LINE_CHARS + 50
    assert len(out.text) <= f.READ_OUTPUT_LIMIT + 200
    assert "output truncated" in out.text


def test_read_empty_and_past_end(ctx: ToolContext) -> None:
    (ctx.root / "empty").write_text("")
    assert "is empty" in run_tool("Read", {"file_path": "empty"}, ctx).text
    (ctx.root / "two").write_text("1\n2\n")
    out = run_tool("Read", {"file_path": "two", "offset": 5}, ctx)
    assert not out.is_error and "has 2 lines" in out.text


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("dir", "is a directory"),
        ("binary", "binary file"),
        ("huge", "read a part with offset and limit"),
    ],
)
def test_read_refusals(ctx: ToolContext, setup: str, message: str) -> None:
    target = ctx.root / "t"
    if setup == "dir":
        target.mkdir()
    elif setup == "binary":
        target.write_bytes(b"\x7fELF\x00\x01\x02")
    elif setup == "huge":
        target.write_text("z" * (f.READ_MAX_WHOLE_FILE_BYTES + 1))
    out = run_tool("Read", {"file_path": "t"}, ctx)
    assert out.is_error
    assert message in out.text


def test_read_huge_file_in_parts(ctx: ToolContext) -> None:
    (ctx.root / "big").write_text("row\n" * 100_000)
    out = run_tool("Read", {"file_path": "big", "offset": 99_999, "limit": 10}, ctx)
    assert out.text == " 99999\trow\n100000\trow"


def test_write_creates_parents_and_overwrites(ctx: ToolContext) -> None:
    out = run_tool("Write", {"file_path": "a/b/c.txt", "content": "héllo"}, ctx)
    assert not out.is_error and out.text.startswith("Created")
    assert (ctx.root / "a/b/c.txt").read_text() == "héllo"
    out = run_tool("Write", {"file_path": str(ctx.root / "a/b/c.txt"), "content": "new"}, ctx)
    assert out.text.startswith("Overwrote")
    assert (ctx.root / "a/b/c.txt").read_text() == "new"


def test_write_to_a_directory_or_fifo_is_refused(ctx: ToolContext) -> None:
    (ctx.root / "d").mkdir()
    out = run_tool("Write", {"file_path": "d", "content": "x"}, ctx)
    assert out.is_error and "is a directory" in out.text
    os.mkfifo(ctx.root / "pipe")
    out = run_tool("Write", {"file_path": "pipe", "content": "x"}, ctx)
    assert out.is_error and "not a regular file" in out.text
    out = run_tool("Read", {"file_path": "pipe"}, ctx)
    assert out.is_error and "not a regular file" in out.text


def test_edit_replaces_a_unique_match_and_shows_it(ctx: ToolContext) -> None:
    (ctx.root / "m.py").write_text("def a():\n    return 1\n\ndef b():\n    return 2\n")
    out = run_tool(
        "Edit",
        {"file_path": "m.py", "old_string": "return 2", "new_string": "return 3"},
        ctx,
    )
    assert not out.is_error
    assert (ctx.root / "m.py").read_text().endswith("return 3\n")
    assert "replaced 1 occurrence" in out.text
    assert "     5\t    return 3" in out.text


def test_edit_keeps_crlf_line_endings(ctx: ToolContext) -> None:
    (ctx.root / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    run_tool("Edit", {"file_path": "w.txt", "old_string": "two", "new_string": "2"}, ctx)
    assert (ctx.root / "w.txt").read_bytes() == b"one\r\n2\r\n"


def test_edit_non_unique_needs_replace_all(ctx: ToolContext) -> None:
    (ctx.root / "r.txt").write_text("x x x")
    out = run_tool("Edit", {"file_path": "r.txt", "old_string": "x", "new_string": "y"}, ctx)
    assert out.is_error and "occurs 3 times" in out.text and "replace_all" in out.text
    assert (ctx.root / "r.txt").read_text() == "x x x"
    out = run_tool(
        "Edit",
        {"file_path": "r.txt", "old_string": "x", "new_string": "y", "replace_all": True},
        ctx,
    )
    assert not out.is_error and "replaced 3 occurrences" in out.text
    assert (ctx.root / "r.txt").read_text() == "y y y"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("absent", "x", "was not found"),
        ("same", "same", "identical"),
        ("", "x", "old_string is empty"),
    ],
)
def test_edit_refusals(ctx: ToolContext, old: str, new: str, message: str) -> None:
    (ctx.root / "e.txt").write_text("same text\n")
    out = run_tool("Edit", {"file_path": "e.txt", "old_string": old, "new_string": new}, ctx)
    assert out.is_error and message in out.text
    assert (ctx.root / "e.txt").read_text() == "same text\n"


def test_edit_missing_and_binary_files(ctx: ToolContext) -> None:
    out = run_tool("Edit", {"file_path": "nope", "old_string": "a", "new_string": "b"}, ctx)
    assert out.is_error and "does not exist" in out.text
    (ctx.root / "bin").write_bytes(b"a\x00b")
    out = run_tool("Edit", {"file_path": "bin", "old_string": "a", "new_string": "b"}, ctx)
    assert out.is_error and "binary" in out.text


def test_invalid_input_is_reported_not_raised(ctx: ToolContext) -> None:
    out = run_tool("Read", {"path": "x"}, ctx)
    assert out.is_error
    assert "invalid input for Read" in out.text and "file_path" in out.text
    assert "path: unknown field" in out.text


def test_unexpected_exception_is_an_internal_tool_error(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*_: object) -> None:
        raise ZeroDivisionError("kaboom")

    monkeypatch.setattr(f, "read", boom)
    out = run_tool("Read", {"file_path": "x"}, ctx)
    assert out.is_error
    assert "internal error in the Read tool" in out.text and "ZeroDivisionError" in out.text
    assert "Traceback" in caplog.text or any(r.exc_info for r in caplog.records)
