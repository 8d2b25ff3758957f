"""The import graph of `orchestrator` has no cycles, and each package imports only
what its `__init__` docstring's "May import:" line allows.

How the graph is built (with `ast`, nothing is imported):
- An edge goes from a module to the module an import statement names:
  `from orchestrator.x import y` is `orchestrator.x.y` when that is a module,
  else `orchestrator.x`. Relative imports are resolved.
- Module-level and function-level imports both count; a cycle report says
  which kind each edge is. A function-level import defers the cost of a
  dependency (`warden exec` stays light), it does not remove it: a cycle through
  one means two modules need each other, and it turns into an import-time failure
  the day someone moves the import up. So both kinds fail the test.
- Imports under `if TYPE_CHECKING:` never run and are how a type-only dependency
  is written without a cycle: they are not edges.
- Importing `a.b.c` also runs `a/b/__init__.py`; that implicit edge is not
  counted: a package `__init__` is either already running (an import from inside
  the package) or a re-export facade whose own imports are its edges.

The package rules: `errors`, `jsontypes`, `schema_docs`, `regular_file` (the one
safe read of a file a sandbox may have written, which every package that reads the
workspace needs), `locking` (the one bounded wait for a lock a sandbox can hold) and the root package (`__version__`) may be imported from
anywhere; every other import that leaves a package (or a top-level module) must name a package or module listed in backticks on its
docstring's "May import:" line ("everything" for the top: `cli`, `commands`).
A sub-package with its own "May import:" line (`permissions.shell`) is a room of
its own: its package may import it, and it may import only what its line names
(its parent package too only when named).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "orchestrator"
ALWAYS_ALLOWED = frozenset(
    {
        "orchestrator",
        "orchestrator.errors",
        "orchestrator.jsontypes",
        "orchestrator.locking",
        "orchestrator.regular_file",
        "orchestrator.schema_docs",
    }
)
RULE_MARK = "May import:"
DATA_DIRS = ("orchestrator/demo/",)
"""Files shipped as data (the demo workspace), not modules of the package."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    level: str
    """"module" or "function"."""


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if path.relative_to(ROOT).as_posix().startswith(DATA_DIRS):
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    body: list[ast.stmt], level: str
) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, level
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _import_nodes(node.body, "function")
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.orelse, level)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for item in getattr(node, field, None) or []:
                    if isinstance(item, ast.stmt):
                        yield from _import_nodes([item], level)
                    elif isinstance(item, ast.ExceptHandler | ast.match_case):
                        yield from _import_nodes(item.body, level)


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def edges(known: Mapping[str, Path]) -> list[Edge]:
    out: list[Edge] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, level in _import_nodes(tree.body, "module"):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
                ]
            for target in targets:
                resolved = _resolve(target, known) if target.startswith(PACKAGE) else None
                if resolved is not None and resolved != name:
                    out.append(Edge(name, resolved, node.lineno, level))
    return out


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(graph) | {t for ts in graph.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _owner(module: str, stated: Mapping[str, object] | None = None) -> str:
    """The package (or top-level module) a module belongs to: `orchestrator.x`, or the
    innermost sub-package with its own rule (`orchestrator.x.y`)."""
    parts = module.split(".")
    for depth in range(len(parts), 2, -1):
        candidate = ".".join(parts[:depth])
        if stated is not None and candidate in stated:
            return candidate
    return ".".join(parts[:2])


def rules(known: Mapping[str, Path]) -> dict[str, frozenset[str] | None]:
    """Per package / top-level module, and per sub-package that states one: what its
    docstring allows (None: everything)."""
    out: dict[str, frozenset[str] | None] = {}
    for name, path in known.items():
        if name.count(".") < 1 or (name.count(".") > 1 and path.name != "__init__.py"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if RULE_MARK not in doc:
            continue
        # The rule is the sentence after the mark ("Never imports `x`." may follow).
        text = re.split(r"\.(?:\s|$)", doc.split(RULE_MARK, 1)[1], maxsplit=1)[0]
        if text.strip().startswith("everything"):
            out[name] = None
            continue
        allowed = set()
        for token in text.split("`")[1::2]:
            candidate = f"{PACKAGE}.{token}"
            if candidate in known:
                allowed.add(candidate)
        out[name] = frozenset(allowed)
    return out


@pytest.fixture(scope="module")
def known() -> dict[str, Path]:
    return modules()


@pytest.fixture(scope="module")
def graph_edges(known: dict[str, Path]) -> list[Edge]:
    return edges(known)


def test_no_import_cycles(graph_edges: list[Edge]) -> None:
    graph: dict[str, set[str]] = {}
    for edge in graph_edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    found = cycles(graph)
    report = []
    for component in found:
        members = set(component)
        report.append(
            " | ".join(
                f"{e.source}:{e.line} -> {e.target} ({e.level})"
                for e in graph_edges
                if e.source in members and e.target in members
            )
        )
    assert not found, "import cycles:\n" + "\n".join(report)


def package_cycles(known: Mapping[str, Path], graph_edges: list[Edge]) -> list[str]:
    """Packages (and rooms) that import each other, even through different modules:
    each such cycle is one package pointing back at a floor above it."""
    stated = rules(known)
    graph: dict[str, set[str]] = {}
    for edge in graph_edges:
        source, target = _owner(edge.source, stated), _owner(edge.target, stated)
        if source != target and not target.startswith(source + "."):
            graph.setdefault(source, set()).add(target)
    report = []
    for component in cycles(graph):
        members = set(component)
        report.append(
            " | ".join(
                f"{e.source}:{e.line} -> {e.target}"
                for e in graph_edges
                if _owner(e.source, stated) in members
                and _owner(e.target, stated) in members
                and _owner(e.source, stated) != _owner(e.target, stated)
            )
        )
    return report


def test_no_package_imports_one_that_imports_it(
    known: dict[str, Path], graph_edges: list[Edge]
) -> None:
    """No back edges between packages (docs/architecture.md: the floors go one way)."""
    found = package_cycles(known, graph_edges)
    assert not found, "packages that import each other:\n" + "\n".join(found)


def test_every_package_states_what_it_may_import(known: dict[str, Path]) -> None:
    stated = rules(known)
    owners = {_owner(m) for m in known if m != PACKAGE}
    missing = sorted(o for o in owners if o not in stated and o not in ALWAYS_ALLOWED)
    assert not missing, f"no '{RULE_MARK}' line in the docstring of: {', '.join(missing)}"


def forbidden(known: Mapping[str, Path], graph_edges: list[Edge]) -> list[str]:
    """The edges no "May import:" line allows."""
    stated = rules(known)
    wrong = []
    for edge in graph_edges:
        source, target = _owner(edge.source, stated), _owner(edge.target, stated)
        if source == target or target in ALWAYS_ALLOWED or edge.target in ALWAYS_ALLOWED:
            continue
        if target.startswith(source + "."):
            continue  # a package uses its own rooms
        allowed = stated.get(source, frozenset())
        if allowed is None:
            continue
        # A rule names a package (all of it) or one module of it.
        if not any(edge.target == a or edge.target.startswith(a + ".") for a in allowed):
            wrong.append(f"{edge.source}:{edge.line} imports {edge.target} ({edge.level})")
    return wrong


def test_packages_import_only_what_they_state(
    known: dict[str, Path], graph_edges: list[Edge]
) -> None:
    wrong = forbidden(known, graph_edges)
    assert not wrong, "imports their package's docstring does not allow:\n" + "\n".join(wrong)


def test_the_checks_catch_a_cycle_and_a_forbidden_import(tmp_path: Path) -> None:
    """The checker itself: a two-module cycle through a function-level import is
    found, so is a cycle between packages through different modules, and so is an
    import a docstring does not allow."""
    pkg = tmp_path / PACKAGE
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text('"""A.\n\nMay import: `errors`.\n"""\n')
    (pkg / "a" / "one.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from orchestrator.b import two\n"
        "if TYPE_CHECKING:\n    from orchestrator.b import three\n"
    )
    (pkg / "b" / "__init__.py").write_text('"""B.\n\nMay import: `a`. Never `c`.\n"""\n')
    (pkg / "b" / "two.py").write_text("def f():\n    from orchestrator.a import one\n")
    (pkg / "b" / "three.py").write_text("")
    known = {
        "orchestrator": pkg / "__init__.py",
        "orchestrator.a": pkg / "a" / "__init__.py",
        "orchestrator.a.one": pkg / "a" / "one.py",
        "orchestrator.b": pkg / "b" / "__init__.py",
        "orchestrator.b.two": pkg / "b" / "two.py",
        "orchestrator.b.three": pkg / "b" / "three.py",
    }
    found = edges(known)
    assert {(e.source, e.target, e.level) for e in found} == {
        ("orchestrator.a.one", "orchestrator.b.two", "module"),
        ("orchestrator.b.two", "orchestrator.a.one", "function"),
    }
    graph: dict[str, set[str]] = {}
    for e in found:
        graph.setdefault(e.source, set()).add(e.target)
    assert cycles(graph) == [["orchestrator.a.one", "orchestrator.b.two"]]
    (pkg / "b" / "two.py").write_text("")
    (pkg / "b" / "four.py").write_text("from orchestrator.a import one\n")
    known["orchestrator.b.four"] = pkg / "b" / "four.py"
    # No module cycle any more, yet the packages still point at each other.
    assert cycles({"orchestrator.a.one": {"orchestrator.b.two"}}) == []
    assert package_cycles(known, edges(known)) == [
        "orchestrator.a.one:2 -> orchestrator.b.two | orchestrator.b.four:1 -> orchestrator.a.one"
    ]
    stated = rules(known)
    assert stated["orchestrator.a"] == frozenset()  # `errors` is not a module here
    assert stated["orchestrator.b"] == frozenset({"orchestrator.a"})
    (pkg / "c").mkdir()
    (pkg / "c" / "__init__.py").write_text("")
    known["orchestrator.c"] = pkg / "c" / "__init__.py"
    assert rules(known)["orchestrator.b"] == frozenset({"orchestrator.a"})  # not `c`


def test_a_room_with_its_own_rule_is_held_to_it(tmp_path: Path) -> None:
    """A sub-package with a "May import:" line: its parent may import it, it may not
    import its parent unless its line names it."""
    pkg = tmp_path / PACKAGE
    (pkg / "p" / "room").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "p" / "__init__.py").write_text('"""P.\n\nMay import: nothing.\n"""\n')
    (pkg / "p" / "user.py").write_text("from orchestrator.p.room import inner\n")
    (pkg / "p" / "models.py").write_text("")
    (pkg / "p" / "room" / "__init__.py").write_text('"""Room.\n\nMay import: nothing.\n"""\n')
    (pkg / "p" / "room" / "inner.py").write_text("from orchestrator.p import models\n")
    known = {
        "orchestrator": pkg / "__init__.py",
        "orchestrator.p": pkg / "p" / "__init__.py",
        "orchestrator.p.user": pkg / "p" / "user.py",
        "orchestrator.p.models": pkg / "p" / "models.py",
        "orchestrator.p.room": pkg / "p" / "room" / "__init__.py",
        "orchestrator.p.room.inner": pkg / "p" / "room" / "inner.py",
    }
    assert forbidden(known, edges(known)) == [
        "orchestrator.p.room.inner:1 imports orchestrator.p.models (module)"
    ]
    (pkg / "p" / "room" / "__init__.py").write_text(
        '"""Room.\n\nMay import: `p.models`.\n"""\n'
    )
    assert forbidden(known, edges(known)) == []
