"""The import graph of ``anekit``: no cycles, and no module imports from a layer above it.

The graph is read from the source (the AST of every module), so it counts imports inside
functions too: a lazy import between two anekit modules is how a circle hides. Imports
under ``if TYPE_CHECKING:`` do not run and do not count, nor does a module's import of
its own parent packages (``anekit.mil.ops.registry`` importing ``anekit.mil``), which
Python has already begun to import when the module runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "anekit"

# The layers, lowest first; a module may import from its own layer and the layers below.
# Packages that do not exist yet are simply absent from the tree.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "config", "files", "fp16"}),
    frozenset({"mil"}),
    frozenset({"hw"}),
    frozenset({"passes"}),  # the convert and device pipelines (hw's limits, for backends)
    frozenset({"backends"}),
    frozenset({"nn"}),
    # the feature layer, in its own order: compression < train < frontends, llm;
    # ladder < doctor, probe
    frozenset({"compression", "bench", "inspect"}),
    frozenset({"train"}),
    frozenset({"frontends", "llm"}),
    frozenset({"ladder"}),
    frozenset({"doctor", "probe"}),
    frozenset({"cli", "__main__"}),
)
# anekit/__init__.py re-exports lazily (importlib by name), so it sits outside the layers.
EXEMPT = frozenset({"anekit"})


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted module name of a file under ``root`` (the ``anekit/`` directory)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, except those under ``if TYPE_CHECKING``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the else branch does run
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, node: ast.ImportFrom | ast.Import, known: set[str]) -> list[str]:
    """The anekit modules one import statement of module ``name`` names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    base = node.module or ""
    if node.level:  # relative: drop one package per dot (a module's own name counts once)
        package = name.split(".") if name in _packages(known) else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    found = []
    for alias in node.names:
        child = f"{base}.{alias.name}"
        if child in known:
            found.append(child)  # from package import submodule
        elif base in known:
            found.append(base)
    return found


def _packages(known: set[str]) -> set[str]:
    return {m for m in known if any(k.startswith(m + ".") for k in known)}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the anekit modules it imports (see the module docstring for what counts)."""
    mods = modules(root)
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for node in _import_nodes(tree):
            targets.update(_resolve(name, node, known))
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = targets - parents - {name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module, each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(_closed_path(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One cycle through a component, start repeated at the end, for a readable message."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in component)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return [*path, start]
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return [*path, *(back or nxt[:1])]
        path.append(fresh[0])
        seen.add(fresh[0])


def layer_of(name: str) -> int | None:
    """The layer of a module (by its top-level package under anekit), None if exempt."""
    if name in EXEMPT:
        return None
    top = name.split(".")[1]
    for level, members in enumerate(LAYERS):
        if top in members:
            return level
    raise AssertionError(f"module {name} is in no layer: add anekit.{top} to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a module into a layer above its own."""
    bad = []
    for name, targets in sorted(graph.items()):
        level = layer_of(name)
        for t in sorted(targets):
            target_level = layer_of(t)
            if level is not None and target_level is not None and target_level > level:
                bad.append(f"{name} (layer {level}) imports {t} (layer {target_level})")
    return bad


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_upward_imports() -> None:
    bad = upward_imports(import_graph())
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_every_module_has_a_layer() -> None:
    for name in import_graph():
        layer_of(name)  # raises for a module outside the table


# -- the checker itself: it must see what it claims to see -----------------------------------
def test_finds_a_cycle_hidden_in_a_function() -> None:
    graph = {"anekit.mil.a": {"anekit.mil.b"}, "anekit.mil.b": {"anekit.mil.a"}, "anekit.x": set()}
    assert find_cycles(graph) == [["anekit.mil.a", "anekit.mil.b", "anekit.mil.a"]]


def test_reads_lazy_imports_and_skips_type_checking(tmp_path) -> None:
    pkg = tmp_path / "anekit"
    (pkg / "mil").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mil" / "__init__.py").write_text("")
    (pkg / "mil" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from anekit.mil import c\n"
        "def f():\n    from anekit.mil import b\n"
    )
    (pkg / "mil" / "b.py").write_text("import anekit.mil\nfrom . import a\n")
    (pkg / "mil" / "c.py").write_text("from anekit.mil.a import f\n")
    graph = import_graph(pkg)
    assert graph["anekit.mil.a"] == {"anekit.mil.b"}  # lazy counted, TYPE_CHECKING not
    assert graph["anekit.mil.b"] == {"anekit.mil.a"}  # own parent package not counted
    assert graph["anekit.mil.c"] == {"anekit.mil.a"}
    assert find_cycles(graph) == [["anekit.mil.a", "anekit.mil.b", "anekit.mil.a"]]


def test_flags_an_upward_import() -> None:
    graph = {"anekit.mil.x": {"anekit.hw.rules"}, "anekit.hw.rules": {"anekit.mil.x"}}
    assert upward_imports(graph) == ["anekit.mil.x (layer 1) imports anekit.hw.rules (layer 2)"]


@pytest.mark.parametrize("name", ["anekit.nowhere.x"])
def test_unknown_package_is_named(name: str) -> None:
    with pytest.raises(AssertionError, match="anekit.nowhere"):
        layer_of(name)
