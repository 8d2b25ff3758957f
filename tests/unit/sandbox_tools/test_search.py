"""The Glob and Grep tools: glob syntax (`**`, braces, classes), results newest
first, version-control directories skipped, Grep's three output modes with
context, case folding, line numbers, glob filter and head_limit, binary files
skipped, invalid patterns reported, and every cap announced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_tools.tools import ToolContext, run_tool
from sandbox_tools.tools import search as s


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path.resolve()
    files = {
        "src/app.py": "import os\nprint('Hello')\n",
        "src/util/helpers.py": "def helper():\n    return 'hello'\n",
        "src/web/page.ts": "const hello = 1;\n",
        "src/web/page.tsx": "export const Page = 2;\n",
        "README.md": "# Hello project\nsee src/\n",
        ".git/config": "hello from git\n",
        "data.bin": "hello\x00binary",
    }
    for i, (name, content) in enumerate(files.items()):
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    return ToolContext(root=root)


def rel(ctx: ToolContext, text: str) -> list[str]:
    return [os.path.relpath(line, ctx.root) for line in text.splitlines()]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.py", {"src/app.py", "src/util/helpers.py"}),
        ("*.py", set()),
        ("src/*.py", {"src/app.py"}),
        ("src/**/*.{ts,tsx}", {"src/web/page.ts", "src/web/page.tsx"}),
        ("**/page.ts?", {"src/web/page.tsx"}),
        ("**/[ar]*", {"src/app.py"}),
        ("*.md", {"README.md"}),
        ("**/config", set()),
    ],
)
def test_glob_patterns(ctx: ToolContext, pattern: str, expected: set[str]) -> None:
    out = run_tool("Glob", {"pattern": pattern}, ctx)
    assert not out.is_error
    found = set() if out.text == "No files found" else set(rel(ctx, out.text))
    assert found == expected


def test_glob_newest_first_and_with_path(ctx: ToolContext) -> None:
    out = run_tool("Glob", {"pattern": "**/*", "path": "src"}, ctx)
    assert rel(ctx, out.text) == [
        "src/web/page.tsx",
        "src/web/page.ts",
        "src/util/helpers.py",
        "src/app.py",
    ]
    absolute = run_tool("Glob", {"pattern": f"{ctx.root}/src/*.py"}, ctx)
    assert rel(ctx, absolute.text) == ["src/app.py"]


def test_glob_cap_is_announced(ctx: ToolContext) -> None:
    many = ctx.root / "many"
    many.mkdir()
    for i in range(s.GLOB_RESULT_LIMIT + 7):
        (many / f"f{i}.txt").write_text("")
    out = run_tool("Glob", {"pattern": "many/*.txt"}, ctx)
    lines = out.text.splitlines()
    assert len(lines) == s.GLOB_RESULT_LIMIT + 1
    assert lines[-1].startswith(
        f"[output truncated: showing {s.GLOB_RESULT_LIMIT} of {s.GLOB_RESULT_LIMIT + 7} paths"
    )


def test_glob_errors(ctx: ToolContext) -> None:
    out = run_tool("Glob", {"pattern": "*", "path": "nope"}, ctx)
    assert out.is_error and "does not exist" in out.text
    out = run_tool("Glob", {"pattern": "src/{a,b"}, ctx)
    assert out.is_error and "unclosed" in out.text


def test_grep_files_with_matches_is_the_default_and_skips_binary_and_git(
    ctx: ToolContext,
) -> None:
    out = run_tool("Grep", {"pattern": "hello"}, ctx)
    assert rel(ctx, out.text) == ["src/web/page.ts", "src/util/helpers.py"]
    out = run_tool("Grep", {"pattern": "hello", "-i": True}, ctx)
    assert rel(ctx, out.text) == [
        "README.md",
        "src/web/page.ts",
        "src/util/helpers.py",
        "src/app.py",
    ]


def test_grep_content_mode_with_line_numbers_and_context(ctx: ToolContext) -> None:
    (ctx.root / "c.txt").write_text("a\nb\nMATCH 1\nc\nd\ne\nf\nMATCH 2\ng\n")
    out = run_tool(
        "Grep",
        {"pattern": "MATCH", "path": "c.txt", "output_mode": "content", "-C": 1},
        ctx,
    )
    p = str(ctx.root / "c.txt")
    assert out.text.splitlines() == [
        f"{p}-2-b",
        f"{p}:3:MATCH 1",
        f"{p}-4-c",
        "--",
        f"{p}-7-f",
        f"{p}:8:MATCH 2",
        f"{p}-9-g",
    ]
    plain = run_tool(
        "Grep",
        {"pattern": "MATCH 2", "path": "c.txt", "output_mode": "content", "-n": False, "-A": 1},
        ctx,
    )
    assert plain.text.splitlines() == [f"{p}:MATCH 2", f"{p}-g"]


def test_grep_count_and_glob_filter(ctx: ToolContext) -> None:
    out = run_tool(
        "Grep", {"pattern": "e", "output_mode": "count", "glob": "*.{ts,tsx}", "-i": True}, ctx
    )
    assert sorted(rel(ctx, out.text)) == ["src/web/page.ts:1", "src/web/page.tsx:1"]
    out = run_tool("Grep", {"pattern": "o", "glob": "src/util/*.py"}, ctx)
    assert rel(ctx, out.text) == ["src/util/helpers.py"]


def test_grep_head_limit_and_default_cap_are_announced(ctx: ToolContext) -> None:
    (ctx.root / "many.txt").write_text("hit\n" * (s.GREP_RESULT_LIMIT + 50))
    out = run_tool(
        "Grep",
        {"pattern": "hit", "path": "many.txt", "output_mode": "content", "head_limit": 5},
        ctx,
    )
    lines = out.text.splitlines()
    assert len(lines) == 6 and lines[-1].startswith("[output truncated: showing 5 lines")
    out = run_tool("Grep", {"pattern": "hit", "path": "many.txt", "output_mode": "content"}, ctx)
    lines = out.text.splitlines()
    assert len(lines) == s.GREP_RESULT_LIMIT + 1 and "output truncated" in lines[-1]


def test_grep_caps_long_lines_and_total_output(ctx: ToolContext) -> None:
    (ctx.root / "wide.txt").write_text(("w" * 5000 + "\n") * 100)
    out = run_tool("Grep", {"pattern": "w", "output_mode": "content"}, ctx)
    assert "… [line truncated]" in out.text
    assert len(out.text) <= s.GREP_OUTPUT_LIMIT + 200
    assert "output truncated" in out.text


def test_grep_skips_huge_files_and_says_so(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s, "GREP_MAX_FILE_BYTES", 10)
    out = run_tool("Grep", {"pattern": "hello", "path": "src"}, ctx)
    assert "skipped" in out.text and "larger than 10 bytes" in out.text


def test_grep_errors(ctx: ToolContext) -> None:
    out = run_tool("Grep", {"pattern": "(unclosed"}, ctx)
    assert out.is_error and "invalid regular expression" in out.text
    out = run_tool("Grep", {"pattern": "x", "path": "missing"}, ctx)
    assert out.is_error and "does not exist" in out.text
    out = run_tool("Grep", {"pattern": "x", "output_mode": "lines"}, ctx)
    assert out.is_error and "output_mode" in out.text
    assert run_tool("Grep", {"pattern": "zzz_nothing"}, ctx).text == "No matches found"
