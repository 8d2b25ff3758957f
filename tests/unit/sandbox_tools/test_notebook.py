"""NotebookEdit: replaces, inserts and deletes cells of a version 4 notebook by id
(or `cell-N`), clears a replaced code cell's outputs, keeps the file a valid
notebook by nbformat's own validator, and refuses paths outside the workspace,
other file types and malformed notebooks without touching the file."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from sandbox_tools.tools import ToolContext, run_tool


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(root=tmp_path.resolve())


def make_notebook(root: Path, minor: int = 5) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = minor
    code = nbformat.v4.new_code_cell("print(1)", id="aaaa1111")
    code.outputs = [nbformat.v4.new_output("stream", text="1\n")]
    code.execution_count = 3
    nb.cells = [code, nbformat.v4.new_markdown_cell("# Title", id="bbbb2222")]
    if minor < 5:
        for cell in nb.cells:
            del cell["id"]
    path = root / "analysis.ipynb"
    path.write_text(nbformat.writes(nb))
    return path


def read_valid(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.reads(path.read_text(), as_version=4)
    nbformat.validate(nb)
    return nb


def test_replace_sets_the_source_and_clears_the_old_outputs(ctx: ToolContext) -> None:
    path = make_notebook(ctx.root)
    out = run_tool(
        "NotebookEdit",
        {"notebook_path": str(path), "cell_id": "aaaa1111", "new_source": "print(2)"},
        ctx,
    )
    assert not out.is_error, out.text
    cell = read_valid(path).cells[0]
    assert (cell.source, cell.outputs, cell.execution_count) == ("print(2)", [], None)


def test_replace_may_change_the_cell_type(ctx: ToolContext) -> None:
    path = make_notebook(ctx.root)
    run_tool(
        "NotebookEdit",
        {"notebook_path": "analysis.ipynb", "cell_id": "aaaa1111", "new_source": "text",
         "cell_type": "markdown"},
        ctx,
    )  # fmt: skip
    cell = read_valid(path).cells[0]
    assert cell.cell_type == "markdown" and "outputs" not in cell


def test_insert_after_a_cell_and_at_the_start(ctx: ToolContext) -> None:
    path = make_notebook(ctx.root)
    after = run_tool(
        "NotebookEdit",
        {"notebook_path": str(path), "cell_id": "aaaa1111", "new_source": "x = 1",
         "cell_type": "code", "edit_mode": "insert"},
        ctx,
    )  # fmt: skip
    assert "position 1" in after.text
    run_tool(
        "NotebookEdit",
        {"notebook_path": str(path), "new_source": "intro", "cell_type": "markdown",
         "edit_mode": "insert"},
        ctx,
    )  # fmt: skip
    cells = read_valid(path).cells
    assert [c.source for c in cells] == ["intro", "print(1)", "x = 1", "# Title"]
    assert len({c.id for c in cells}) == 4  # new cells get ids of their own


def test_delete_and_position_names_in_a_notebook_without_ids(ctx: ToolContext) -> None:
    path = make_notebook(ctx.root, minor=4)
    out = run_tool(
        "NotebookEdit",
        {"notebook_path": str(path), "cell_id": "cell-1", "new_source": "", "edit_mode": "delete"},
        ctx,
    )
    assert not out.is_error, out.text
    cells = read_valid(path).cells
    assert [c.source for c in cells] == ["print(1)"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"cell_id": "zzz", "new_source": "x"}, "no cell 'zzz'"),
        ({"new_source": "x", "edit_mode": "insert"}, "cell_type is required to insert"),
        ({"new_source": "x"}, "cell_id is required to replace"),
        ({"notebook_path": "/etc/passwd.ipynb", "new_source": "x"}, "outside the workspace"),
        ({"notebook_path": "notes.txt", "cell_id": "cell-0", "new_source": "x"}, "not a .ipynb"),
    ],
)
def test_bad_edits_are_refused_and_leave_the_file_alone(
    ctx: ToolContext, edit: dict[str, str], message: str
) -> None:
    path = make_notebook(ctx.root)
    before = path.read_bytes()
    out = run_tool("NotebookEdit", {"notebook_path": str(path), **edit}, ctx)
    assert out.is_error and message in out.text
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_notebook_is_refused(ctx: ToolContext) -> None:
    path = ctx.root / "broken.ipynb"
    path.write_text(json.dumps({"cells": [], "nbformat": 3}))
    out = run_tool(
        "NotebookEdit", {"notebook_path": str(path), "cell_id": "cell-0", "new_source": "x"}, ctx
    )
    assert out.is_error and "version 3 notebook" in out.text
    path.write_text("{not json")
    out = run_tool(
        "NotebookEdit", {"notebook_path": str(path), "cell_id": "cell-0", "new_source": "x"}, ctx
    )
    assert out.is_error and "not valid JSON" in out.text
