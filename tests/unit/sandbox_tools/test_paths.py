"""Path confinement: every tool resolves paths through one function that resolves
symlinks first and then checks the result is inside the workspace. Escapes by
`..`, absolute paths, symlinks and symlinked parent directories all fail with
the same error, and every tool uses that function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox_tools.errors import PathOutsideWorkspaceError, ToolError
from sandbox_tools.paths import confine
from sandbox_tools.tools import ToolContext, run_tool


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "inside.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (ws / "link_out").symlink_to(outside / "secret.txt")
    (ws / "dir_out").symlink_to(outside)
    (ws / "link_in").symlink_to(ws / "inside.txt")
    return ws.resolve()


@pytest.mark.parametrize(
    "path",
    ["inside.txt", "./sub/../inside.txt", "new/dir/file.txt", "link_in", ".", "{root}/inside.txt"],
)
def test_paths_inside_are_accepted(root: Path, path: str) -> None:
    resolved = confine(path.format(root=root), root)
    assert resolved == root or root in resolved.parents


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "/etc/passwd",
        "/",
        "{root}/../outside/secret.txt",
        "link_out",
        "dir_out/secret.txt",
        "dir_out/new.txt",
        "~/x",
    ],
)
def test_escaping_paths_are_refused(root: Path, path: str) -> None:
    with pytest.raises(PathOutsideWorkspaceError, match="outside the workspace"):
        confine(path.format(root=root), root)


def test_symlink_inside_is_resolved_to_its_target(root: Path) -> None:
    assert confine("link_in", root) == root / "inside.txt"


def test_empty_and_nul_paths_are_tool_errors(root: Path) -> None:
    with pytest.raises(ToolError, match="empty"):
        confine("", root)
    with pytest.raises(ToolError, match="NUL"):
        confine("a\0b", root)


ESCAPES: list[tuple[str, dict[str, Any]]] = [
    ("Read", {"file_path": "link_out"}),
    ("Read", {"file_path": "../outside/secret.txt"}),
    ("Write", {"file_path": "dir_out/planted.txt", "content": "x"}),
    ("Write", {"file_path": "link_out", "content": "overwritten"}),
    ("Edit", {"file_path": "link_out", "old_string": "secret", "new_string": "x"}),
    ("Glob", {"pattern": "*", "path": "dir_out"}),
    ("Glob", {"pattern": "../outside/*"}),
    ("Glob", {"pattern": "/etc/*"}),
    ("Grep", {"pattern": "secret", "path": "dir_out"}),
    ("Grep", {"pattern": "secret", "path": "/etc"}),
]


@pytest.mark.parametrize(("tool", "tool_input"), ESCAPES)
def test_every_tool_refuses_escapes_with_the_same_wording(
    root: Path, tool: str, tool_input: dict[str, Any]
) -> None:
    out = run_tool(tool, tool_input, ToolContext(root=root))
    assert out.is_error
    assert "outside the workspace" in out.text
    outside = root.parent / "outside"
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert not (outside / "planted.txt").exists()


def test_search_does_not_follow_symlinks_out(root: Path) -> None:
    ctx = ToolContext(root=root)
    found = run_tool("Glob", {"pattern": "**/*.txt"}, ctx)
    assert "secret" not in found.text
    assert str(root / "inside.txt") in found.text
    grep = run_tool("Grep", {"pattern": "secret", "output_mode": "content"}, ctx)
    assert grep.text == "No matches found"
