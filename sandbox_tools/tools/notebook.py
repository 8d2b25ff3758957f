"""NotebookEdit: replace, insert or delete one cell of a Jupyter notebook (`.ipynb`).

Carried out in the sandbox, like Edit, so a notebook is changed under the same
walls as any other file (`confine`, then `replace`, which never leaves the file
worse than it was). It is written with the standard library's `json` rather than
nbformat: the runner carries no third-party package, because it must run
unchanged in any project image, where nbformat is not installed (and installing
it would need a network the sandbox does not have). The format it touches is
small and fixed (nbformat 4: `cells`, each with `cell_type`, `source`,
`metadata`, and for code cells `outputs` and `execution_count`; `id` from 4.5);
the unit tests validate what it writes with nbformat itself.
"""

from __future__ import annotations

import json
import os
import stat

from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject, JSONValue
from sandbox_tools.paths import confine
from sandbox_tools.tools.base import ToolContext, ToolOutput
from sandbox_tools.tools.more_inputs import NotebookEditInput
from sandbox_tools.tools.replace import fs_error, replace

NOTEBOOK_MAX_BYTES = 10 * 1024 * 1024
"""Largest notebook NotebookEdit loads into memory."""

CELL_ID_BYTES = 4
"""Random bytes in a new cell's id (8 hex digits, as Jupyter makes them)."""


def _load(path: str, shown: str) -> tuple[JSONObject, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolError(f"notebook does not exist: {shown}; create it with Write first") from None
    except OSError as e:
        raise fs_error("read", shown, e, unchanged=None) from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{shown} is not a regular file")
        if st.st_size > NOTEBOOK_MAX_BYTES:
            raise ToolError(
                f"{shown} is {st.st_size} bytes, more than NotebookEdit handles "
                f"({NOTEBOOK_MAX_BYTES}); change it with Bash instead"
            )
        data = f.read(NOTEBOOK_MAX_BYTES + 1)
    try:
        notebook = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ToolError(f"{shown} is not a Jupyter notebook (not valid JSON: {e})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ToolError(f"{shown} is not a Jupyter notebook (no `cells` list)")
    if notebook.get("nbformat") != 4:
        raise ToolError(
            f"{shown} is a version {notebook.get('nbformat')!r} notebook; NotebookEdit edits "
            "version 4 notebooks (convert it with `jupyter nbconvert --to notebook`)"
        )
    return notebook, st


def _cells(notebook: JSONObject, shown: str) -> list[JSONObject]:
    cells = notebook["cells"]
    assert isinstance(cells, list)
    if not all(isinstance(c, dict) for c in cells):
        raise ToolError(f"{shown} is not a Jupyter notebook (a cell is not an object)")
    return [c for c in cells if isinstance(c, dict)]


def _index(cells: list[JSONObject], cell_id: str, shown: str) -> int:
    """The position of the cell named `cell_id`: its `id`, or `cell-N` by position."""
    for i, cell in enumerate(cells):
        if cell.get("id") == cell_id:
            return i
    if cell_id.startswith("cell-") and cell_id[5:].isdigit():
        i = int(cell_id[5:])
        if i < len(cells):
            return i
    raise ToolError(
        f"no cell {cell_id!r} in {shown} (it has {len(cells)} cells; name one by its id, "
        "or by its position as cell-N, counting from 0)"
    )


def _source(cell: JSONObject) -> str:
    source = cell.get("source")
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _new_cell(cell_type: str, source: str, with_id: bool) -> JSONObject:
    cell: JSONObject = {"cell_type": cell_type, "metadata": {}, "source": source}
    if with_id:
        cell["id"] = os.urandom(CELL_ID_BYTES).hex()
    if cell_type == "code":
        cell["execution_count"] = None
        cell["outputs"] = []
    return cell


def _retype(cell: JSONObject, cell_type: str, source: str) -> None:
    """Give an existing cell new source (and type); a code cell's outputs are cleared,
    since they belong to the old source."""
    cell["cell_type"] = cell_type
    cell["source"] = source
    if cell_type == "code":
        cell["execution_count"] = None
        cell["outputs"] = []
    else:
        cell.pop("execution_count", None)
        cell.pop("outputs", None)


def notebook_edit(inp: NotebookEditInput, ctx: ToolContext) -> ToolOutput:
    path = confine(inp.notebook_path, ctx.root)
    shown = str(path)
    if path.suffix != ".ipynb":
        raise ToolError(f"{shown} is not a .ipynb file; use Edit for other files")
    notebook, st = _load(str(path), shown)
    cells = _cells(notebook, shown)
    minor = notebook.get("nbformat_minor")
    with_ids = isinstance(minor, int) and minor >= 5
    if inp.edit_mode == "insert":
        if inp.cell_type is None:
            raise ToolError("cell_type is required to insert a cell (code or markdown)")
        at = 0 if inp.cell_id is None else _index(cells, inp.cell_id, shown) + 1
        cell = _new_cell(inp.cell_type, inp.new_source, with_ids)
        cells.insert(at, cell)
        done = f"Inserted a {inp.cell_type} cell at position {at}"
    else:
        if inp.cell_id is None:
            raise ToolError(f"cell_id is required to {inp.edit_mode} a cell")
        at = _index(cells, inp.cell_id, shown)
        cell = cells[at]
        if inp.edit_mode == "delete":
            del cells[at]
            done = f"Deleted cell {inp.cell_id}"
        else:
            old_type = cell.get("cell_type")
            cell_type = inp.cell_type or (old_type if isinstance(old_type, str) else "code")
            if cell_type not in ("code", "markdown"):
                raise ToolError(
                    f"cell {inp.cell_id} is a {cell_type} cell; give cell_type (code or "
                    "markdown) to replace it"
                )
            _retype(cell, cell_type, inp.new_source)
            done = f"Updated cell {inp.cell_id}"
    notebook["cells"] = list[JSONValue](cells)
    data = json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    replace(path, data.encode("utf-8"), shown, st)
    cell_id = cell.get("id")
    named = f" (id {cell_id})" if isinstance(cell_id, str) and inp.edit_mode == "insert" else ""
    return ToolOutput(f"{done}{named} in {shown}.", summary=f"{inp.edit_mode} cell")
