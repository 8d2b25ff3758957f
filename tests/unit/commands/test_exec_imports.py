"""`warden exec`'s start-up imports no pydantic (issue 39: importing it and building
models was most of exec's cost over a bare `docker run`), nor warden modules it does not
use (`NOT_ON_THE_PATH`). A regression guard on the
import set, not a timing test: a fresh interpreter imports the CLI and every module
exec's path imports (read from exec.py itself, so a new import there is covered),
then reports what is in `sys.modules`."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import orchestrator.commands.exec as exec_module

PATH_FUNCTIONS = ("exec_command", "_run", "_resolve_image", "run_interruptible")
"""exec's functions that run for `warden exec -- true`."""
OFF_PATH = ("build_egress",)
"""Nested functions that run only with --allow-domain (egress pays its own imports)."""
NOT_ON_THE_PATH = {
    "orchestrator.egress.limits": "the egress meter (its dataclasses): only with --allow-domain",
    "orchestrator.images.sealing": "the seal shim's program (ast): hook sandboxes only",
    "orchestrator.images.project": "project-image checks: only for a project image",
}
"""warden modules `warden exec -- true` must not load, and why."""
ALSO_LOADED = (
    "orchestrator.cli",  # the console script's entry point
    "orchestrator.backend.docker",  # what `factory.make_backend` builds for the engine
)


def exec_path_modules() -> list[str]:
    """Every module exec.py imports at module level or inside its path's functions,
    leaving out the --allow-domain branch (`if egress_flags is not None:`)."""
    tree = ast.parse(Path(exec_module.__file__).read_text())
    found: set[str] = set()

    def collect(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef) and node.name in OFF_PATH:
            return
        if isinstance(node, ast.If) and "egress_flags is not None" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)  # and each name, which may be a submodule:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            collect(child)

    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef) and statement.name not in PATH_FUNCTIONS:
            continue
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            continue
        collect(statement)
    return sorted({*found, *ALSO_LOADED})


def test_exec_path_reads_its_imports_from_exec_py() -> None:
    modules = exec_path_modules()
    for expected in ("orchestrator.config", "orchestrator.labels", "orchestrator.lifecycle"):
        assert expected in modules
    assert "orchestrator.egress.oneoff" not in modules  # only with --allow-domain


def test_warden_exec_start_up_imports_no_pydantic() -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {exec_path_modules()!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        if exc.name != name:  # a name imported from a module, not a submodule\n"
        "            raise\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'pydantic_core', 'annotated_types') or m in "
        f"{tuple(NOT_ON_THE_PATH)!r})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(proc.stdout) == [], "warden exec's start-up imports what it does not use"
