"""The in-container package is standard library only (the sandbox images carry no
third-party packages) and never imports `orchestrator`: statically, every import
in `sandbox_tools/`, and at run time, everything the runner loads for a task."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_sandbox_tools_imports_only_the_stdlib() -> None:
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
        if top not in sys.stdlib_module_names and top != "sandbox_tools"
    }
    assert foreign == {}


def test_the_runner_loads_nothing_but_the_stdlib() -> None:
    # -S: no site-packages at all, as in the images (nothing third-party is there).
    code = (
        "import sys\n"
        "import sandbox_tools.__main__, sandbox_tools.runner\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "print('FOREIGN', sorted(t for t in top if t not in sys.stdlib_module_names "
        "and t not in ('sandbox_tools', '__main__')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "FOREIGN []" in out.stdout


def test_help_works_without_site_packages() -> None:
    out = subprocess.run(
        [sys.executable, "-S", "-m", "sandbox_tools", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--socket" in out.stdout and "--workspace" in out.stdout
