"""Commands that start sealed: `sandbox_tools.seal`'s fallocate filter installed
first, in the sandbox, by the image's own Python (or warden's borrowed runtime),
then the command itself exec'd in that process.

A subagent's runner installs the filter itself before any tool runs; a hook
sandbox's shim and a `warden exec` command have no runner, so their container's
command is `PYTHON -I -S -c PROGRAM ARGS…`, where PROGRAM is the seal's source
(standard library only, read as text: `-S` leaves `sandbox_tools` unimportable
there) followed by what runs next. For `warden exec` that is an `execvp` of the
user's command, after putting back the signal dispositions Python changed at
start-up (SIGPIPE and SIGXFSZ ignored): the command then runs exactly as it would
have, in the same process, with the filter inherited and irremovable. Costs one
`python -I -S` start in the sandbox (~10-20 ms here, within the noise of a
`docker run`). A command that cannot be run exits 127 (not found) or 126 (not
executable), as a shell and the container's init say it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import WardenError
from sandbox_tools.wire import IMAGE_ENV_VARIABLE

EXEC_TAIL = """
import json, os, signal, sys
_problem = refuse_fallocate()
if _problem:
    sys.stderr.write("warden: warning: fallocate stays allowed in this sandbox (%s); "
                     "the host's free-space floor still holds\\n" % _problem)
_carried = os.environ.pop("IMAGE_ENV_VARIABLE", "")
try:
    _image = json.loads(_carried) if _carried else {}
except ValueError:
    _image = {}
for _key, _value in (_image.items() if isinstance(_image, dict) else ()):
    if isinstance(_value, str) and os.environ.get(_key) == "":
        os.environ[_key] = _value
for _name in ("SIGPIPE", "SIGXFSZ"):
    if hasattr(signal, _name):
        signal.signal(getattr(signal, _name), signal.SIG_DFL)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as _exc:
    sys.stderr.write("warden: cannot run %r: %s\\n" % (sys.argv[1], _exc.strerror))
    sys.stderr.flush()
    os._exit(127 if isinstance(_exc, FileNotFoundError) else 126)
""".replace("IMAGE_ENV_VARIABLE", IMAGE_ENV_VARIABLE)
"""Runs in the sandbox after the seal's source: seal, give the command a project
image's environment back (`sandbox_tools.image_env`), restore signals, become the
command."""


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


def sealed_command(python: Sequence[str], command: Sequence[str]) -> list[str]:
    """The container command that runs `command` under the fallocate filter."""
    return [*python, "-I", "-S", "-c", sealed_program(EXEC_TAIL), *command]
