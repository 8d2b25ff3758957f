"""The in-container package stays self-contained and starts fast: it imports only
the stdlib, pydantic, httpx2 and anthropic (never `orchestrator`), and
`--help` does not import the anthropic SDK."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO_ROOT

ALLOWED_THIRD_PARTY = {"pydantic", "httpx2", "anthropic", "sandbox_tools"}


def test_sandbox_tools_imports_only_the_stdlib_pydantic_and_the_sdk() -> None:
    seen: dict[str, set[str]] = {}
    for path in sorted((REPO_ROOT / "sandbox_tools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                seen.setdefault(name.split(".")[0], set()).add(path.name)
    foreign = {
        top: files
        for top, files in seen.items()
        if top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY
    }
    assert foreign == {}
    assert "anthropic" in seen and "orchestrator" not in seen


def test_help_does_not_load_the_sdk_or_orchestrator() -> None:
    code = (
        "import runpy, sys\n"
        "sys.argv = ['sandbox_tools', '--help']\n"
        "try:\n"
        "    runpy.run_module('sandbox_tools', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('anthropic', 'orchestrator')]\n"
        "print('LOADED', loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert "LOADED []" in out.stdout
    assert "--socket" in out.stdout and "--workspace" in out.stdout
