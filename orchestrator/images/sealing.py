"""Programs that start sealed: `sandbox_tools.seal`'s fallocate filter installed
first, in the sandbox, by the image's own Python, then what runs next.

A subagent's runner installs the filter itself before any tool runs; a hook
sandbox's shim has no runner, so its container's command is
`PYTHON -I -S -c PROGRAM ARGS…`, where PROGRAM is the seal's source (standard
library only, read as text: `-S` leaves `sandbox_tools` unimportable there)
followed by the shim.

The filter is a second layer: warden's seccomp profile (`backend.seccomp`), which
the engine applies to every container warden starts, already refuses `fallocate`
with the same EOPNOTSUPP. `warden exec` relies on that wall alone: its command is
the container's entrypoint under the engine's init, as in `docker run --init`, with
no Python of warden's started before it (that start cost ~25 ms of every exec).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

from orchestrator.errors import WardenError


@functools.cache
def seal_source() -> str:
    """The code of `sandbox_tools/seal.py` (found without importing the package),
    without its docstrings and comments: it is part of a container's command line,
    which `docker ps` and `ps` show."""
    spec = importlib.util.find_spec("sandbox_tools")
    if spec is None or not spec.submodule_search_locations:
        raise WardenError(
            "warden's sandbox_tools package is missing from this installation; "
            "reinstall warden (pip install -e .)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "seal.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.FunctionDef) and body and _is_docstring(body[0]):
            del body[0]
    return ast.unparse(tree)


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def sealed_program(tail: str) -> str:
    """A `python -I -S -c` program: the seal's source, then `tail` (which calls
    `refuse_fallocate()` itself, so it decides what a refusal to seal means)."""
    return f"{seal_source()}\n{tail}"

