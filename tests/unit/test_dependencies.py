"""Locks in the dependency contract: every third-party module the code imports is
declared in `pyproject.toml` (runtime code in `dependencies`, tests and benchmarks
may also use the `test` extra), and every declared dependency is imported somewhere,
so nothing is installed for nothing and nothing works only by accident."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_TREES = ("orchestrator", "sandbox_tools")
TEST_TREES = ("tests", "bench", "docs")
"""`docs` holds the documentation site's hooks and a worked webhook receiver."""
FIRST_PARTY = {"orchestrator", "sandbox_tools", "tests", "bench"} | {
    path.stem for path in (ROOT / "bench").glob("*.py")
}
"""warden's packages, and the benchmarks' modules (they import one another by name)."""
NOT_CODE = ("orchestrator/demo/",)
"""The demo's sample project is a user's files, not warden's code."""
TOOLS_NOT_IMPORTED = {
    "pytest-asyncio",
    "pytest-timeout",
    "pytest-xdist",
    "mypy",
    "ruff",
    "types-pyyaml",
    "types-docker",
    "types-requests",
    "mkdocs-material",
    "mkdocs-click",
}
"""Declared test tools used as plugins or commands, never imported by name (the two
mkdocs plugins are named in mkdocs.yml)."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(group: str | None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return {_normal(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0]) for spec in specs}


def _imported_modules(tree: str) -> dict[str, str]:
    """Dotted module name -> one file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / tree).rglob("*.py")):
        if str(path.relative_to(ROOT)).startswith(NOT_CODE):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name, str(path.relative_to(ROOT)))
    return found


@cache
def _distributions() -> Mapping[str, list[str]]:
    return packages_distributions()


@cache
def _files_of(dist: str) -> tuple[str, ...]:
    return tuple(str(f) for f in distribution(dist).files or ())


def _distribution_of(module: str) -> str | None:
    """The distribution providing `module`; for a namespace shared by several
    (`opentelemetry`), the one whose files hold the dotted path."""
    candidates = _distributions().get(module.split(".")[0], [])
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    prefix = module.replace(".", "/")
    for dist in candidates:
        if any(f.startswith((prefix + "/", prefix + ".py")) for f in _files_of(dist)):
            return dist
    return None


def _third_party(trees: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """Distribution -> (module, file) for every third-party import in `trees`."""
    out: dict[str, tuple[str, str]] = {}
    for tree in trees:
        for module, file in _imported_modules(tree).items():
            top = module.split(".")[0]
            if top in FIRST_PARTY or top in sys.stdlib_module_names:
                continue
            dist = _distribution_of(module)
            assert dist, f"{file} imports {module!r}, which no installed distribution provides"
            out.setdefault(_normal(dist), (module, file))
    return out


def test_runtime_code_imports_only_declared_dependencies() -> None:
    declared = _declared(None)
    undeclared = {
        dist: where for dist, where in _third_party(RUNTIME_TREES).items() if dist not in declared
    }
    assert not undeclared, f"imported but not in [project] dependencies: {undeclared}"


def test_tests_and_benchmarks_import_only_declared_dependencies() -> None:
    declared = _declared(None) | _declared("test")
    undeclared = {
        dist: where for dist, where in _third_party(TEST_TREES).items() if dist not in declared
    }
    assert not undeclared, f"imported but declared nowhere: {undeclared}"


def test_every_declared_dependency_is_imported() -> None:
    runtime_used = set(_third_party(RUNTIME_TREES))
    unused_runtime = _declared(None) - runtime_used
    assert not unused_runtime, f"declared in dependencies but never imported: {unused_runtime}"
    test_used = runtime_used | set(_third_party(TEST_TREES))
    unused_test = _declared("test") - test_used - TOOLS_NOT_IMPORTED
    assert not unused_test, f"declared in the test extra but never imported: {unused_test}"
