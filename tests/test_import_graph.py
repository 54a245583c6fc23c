"""No import circles in the ``grid`` package (issue 32).

The module import graph is built from the source with ``ast``, not by importing anything:
every ``import`` and ``from ... import`` counts, including those under ``if TYPE_CHECKING:``
and inside functions, because a type-only or deferred import still ties the two modules
together (each needs the other to be understood, type-checked or refactored). Relative
imports are resolved, and ``from grid.x import name`` points at ``grid.x.name`` when
``name`` is a submodule, otherwise at ``grid.x`` itself.

Importing ``grid.a.b`` also runs ``grid/a/__init__.py`` first; that implicit parent edge is
not counted (every submodule would otherwise form a circle with a package that re-exports
it). An explicit ``from grid.a import Name`` inside ``grid.a``'s own submodules is counted.

A cycle is a strongly connected component of more than one module, or a module that
imports itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "grid"
ROOT = Path(__file__).resolve().parent.parent / "python" / PACKAGE

# Cycles that are known and not yet broken, each with why. Empty: every cycle is broken, and
# any new one fails the test.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

NATIVE = f"{PACKAGE}._native"
# ``grid.membership`` is the asyncio face of the extension; these others already read it
# directly (the version, digests, the simulator, build info). A new importer fails the test.
NATIVE_IMPORTERS = [
    "grid",
    "grid.booklet.swim",
    "grid.membership",
    "grid.meshbench.peers",
    "grid.render.digest",
    "grid.render.overlay",
    "grid.runtime.metrics",
    "grid.simbench.profiles",
    "grid.simbench.scenarios",
    "grid.simbench.state",
]


def _module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name ``from <level dots><name> import ...`` means inside ``module``."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """Every grid module ``module`` imports, with the line of the import."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                source = _resolve_relative(module, is_package, node.level, node.module)
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in known else source), node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """``module -> {imported module: first line}`` over the grid modules found on disk."""
    files = _module_files()
    # ``grid._native`` is a compiled extension: a leaf with no ``.py`` source.
    known = {*files, NATIVE}
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges: dict[str, int] = {}
        for target, line in _imports(module, path, known):
            if target in known:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def strongly_connected_components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough to matter for recursion)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        index[start] = lowlink[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph.get(start, {})))))
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = lowlink[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    lowlink[node] = min(lowlink[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    cycles = [
        component
        for component in strongly_connected_components(graph)
        if len(component) > 1 or component[0] in graph.get(component[0], {})
    ]
    return sorted(cycles)


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    lines = [f"cycle of {len(component)} module(s): {', '.join(component)}"]
    for module in component:
        for target, line in sorted(graph[module].items()):
            if target in members:
                lines.append(f"    {module} -> {target}  (line {line})")
    return "\n".join(lines)


def test_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "grid.membership" in graph
    assert NATIVE in graph["grid.membership"]
    assert len(graph) > 50


def test_relative_imports_resolve() -> None:
    assert _resolve_relative("grid.agent.http", False, 1, "agent") == "grid.agent.agent"
    assert _resolve_relative("grid.agent", True, 1, "http") == "grid.agent.http"
    assert _resolve_relative("grid.agent.http", False, 2, "models") == "grid.models"
    assert _resolve_relative("grid.agent.http", False, 1, None) == "grid.agent"


def test_cycle_finder_sees_self_loops_and_circles() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"d": 1}, "e": {"a": 1}}
    assert find_cycles(graph) == [["a", "b", "c"], ["d"]]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    unexpected = [c for c in cycles if frozenset(c) not in KNOWN_CYCLES]
    assert not unexpected, "import cycles in python/grid:\n" + "\n".join(
        _describe(c, graph) for c in unexpected
    )


def test_known_cycles_still_exist() -> None:
    """A known exception that no longer exists must be removed from ``KNOWN_CYCLES``."""
    cycles = {frozenset(c) for c in find_cycles(import_graph())}
    stale = [sorted(known) for known in KNOWN_CYCLES if known not in cycles]
    assert not stale, f"known cycles that are gone (remove them from KNOWN_CYCLES): {stale}"


def test_no_new_importers_of_native() -> None:
    importers = sorted(m for m, edges in import_graph().items() if NATIVE in edges)
    assert importers == NATIVE_IMPORTERS
