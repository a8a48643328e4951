"""The package's import graph, read from the source with ``ast``: imports inside functions
count as much as those at the top (an import deferred to call time is still a dependency,
and a cycle through it is one that only shows when the call happens).

An edge goes from a module to each package module it names: ``from .x import y`` names
``x`` (or ``x.y`` when that is a module), ``from .. import __version__`` names the package
``__init__``. Graph cycles are found with Tarjan's strongly connected components.

Two graphs are checked. The module graph has one node per module. The folder graph has one node
per subpackage (``analysis``, ``capture``, ``plugin``, ``trace``, ...: every module inside it is
that one node) and one per top-level module; an import inside an ``if TYPE_CHECKING:`` block
names a type for the checker only and is not an edge of it. A cycle there means two parts of the
package cannot be read, tested or moved one without the other. The TensorFlow wing, ``capture/``,
imports no front door (the API, the CLI, the tab, the notebook, fleet and watch views): a front
door sits on top of what it offers, never underneath it (type-only imports included).
"""
import ast
import os
from typing import Dict, Iterator, List, Set, Tuple

import pytest

from support.paths import ROOT

PACKAGE = "tfbneck_plugin"


def package_modules(root: str = ROOT) -> Dict[str, str]:
    """Dotted module name -> file, for every .py file of the package."""
    out = {}
    for folder, _dirs, files in os.walk(os.path.join(root, PACKAGE)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                out[dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return out


def _target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: str, modules: Dict[str, str], top_level_only: bool = False) -> Set[str]:
    """The package modules ``module`` imports (anywhere in the file, or at its top level only)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            target = _target(module, path.endswith("__init__.py"), node)
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
    out.discard(module)
    return out


def import_graph(root: str = ROOT) -> Dict[str, Set[str]]:
    modules = package_modules(root)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (each holds a cycle)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_counting_imports_inside_functions():
    graph = import_graph()
    assert len(graph) > 40  # the whole package was read
    assert cycles(graph) == []


def test_the_finder_sees_a_cycle_through_a_local_import():
    """The test above can fail: a cycle closed by an import inside a function is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    modules = package_modules()
    verdict = "tfbneck_plugin.analysis.verdict"
    local = imports_of(verdict, modules[verdict], modules) - imports_of(verdict, modules[verdict], modules, True)
    assert local == set()  # the verdict module defers no import
    rules = "tfbneck_plugin.analysis.rules"
    assert verdict in imports_of(rules, modules[rules], modules)


def test_the_package_init_and_version_are_leaves():
    """``import tfbneck_plugin`` imports nothing from the package; ``version`` imports nothing;
    no module imports the package ``__init__``."""
    modules = package_modules()
    assert imports_of(PACKAGE, modules[PACKAGE], modules, top_level_only=True) == set()
    version = open(modules[f"{PACKAGE}.version"], encoding="utf-8").read()
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(version)))
    graph = import_graph()
    assert [m for m, deps in graph.items() if PACKAGE in deps] == []


# --- The folder graph ------------------------------------------------------------------------

#: Front doors: the modules (or a module-name prefix, for a feature of several modules) a user
#: starts from. capture/ imports none of them.
FRONT_DOORS = ("api", "cli", "plugin", "notebook", "fleet_view", "watch", "comparison")

#: One import: the module that holds it, the package module it names, where it is.
Edge = Tuple[str, str, str]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, type_checking: bool) -> Iterator[ast.stmt]:
    """Every import statement of ``tree``, at any depth; those in the body of an
    ``if TYPE_CHECKING:`` only when ``type_checking`` (its ``else`` always counts)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]), type_checking)
            continue
        yield from _import_nodes(node, type_checking)


def import_edges(module: str, path: str, modules: Dict[str, str], source: str = "",
                 type_checking: bool = False) -> Iterator[Edge]:
    """The imports of ``module`` (read from ``path``, or from ``source`` when given) that name a
    package module: (module, imported module, "file:line")."""
    tree = ast.parse(source or open(path, encoding="utf-8").read(), path)
    where = os.path.relpath(path, ROOT)
    for node in _import_nodes(tree, type_checking):
        if isinstance(node, ast.ImportFrom):
            target = _target(module, path.endswith("__init__.py"), node)
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    yield module, (sub if sub in modules else target), f"{where}:{node.lineno}"
        else:
            for alias in node.names:
                if alias.name in modules:
                    yield module, alias.name, f"{where}:{node.lineno}"


def folder_of(module: str) -> str:
    """The folder graph's node of a module: its subpackage, or itself at the top level
    (``tfbneck_plugin.analysis.rules`` -> ``analysis``, ``tfbneck_plugin.api`` -> ``api``, the
    package's own ``__init__`` -> ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def folder_graph(modules: Dict[str, str]) -> Tuple[Dict[str, Set[str]], Dict[Tuple[str, str], List[str]]]:
    """The folder graph (type-only imports left out), and where each of its edges is written."""
    graph: Dict[str, Set[str]] = {folder_of(m): set() for m in modules}
    where: Dict[Tuple[str, str], List[str]] = {}
    for m, path in modules.items():
        for _m, imported, line in import_edges(m, path, modules):
            a, b = folder_of(m), folder_of(imported)
            if a != b:
                graph[a].add(b)
                lines = where.setdefault((a, b), [])
                if line not in lines:
                    lines.append(line)
    return graph, where


def shortest_cycle(graph: Dict[str, Set[str]], component: List[str]) -> List[str]:
    """A shortest cycle through ``component[0]`` inside the component, as its nodes in order."""
    inside = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & inside):
            if w == start:
                return paths[v]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component


def describe_cycles(graph: Dict[str, Set[str]], where: Dict[Tuple[str, str], List[str]]) -> List[str]:
    """One paragraph per cycle: its nodes, then each edge of a shortest cycle with the lines
    that make it, then any other edges inside the same component."""
    out = []
    for component in cycles(graph):
        loop = shortest_cycle(graph, component)
        lines = [f"cycle {' -> '.join(loop + [loop[0]])} (component: {', '.join(component)})"]
        shown = set()
        for a, b in zip(loop, loop[1:] + loop[:1]):
            lines.append(f"  {a} -> {b}: {', '.join(where[(a, b)])}")
            shown.add((a, b))
        lines += [f"  also {a} -> {b}: {', '.join(where[(a, b)])}" for a in component
                  for b in sorted(graph[a] & set(component)) if (a, b) not in shown]
        out.append("\n".join(lines))
    return out


def is_front_door(module: str) -> bool:
    return folder_of(module) in FRONT_DOORS


def front_door_imports_of_capture(modules: Dict[str, str]) -> List[str]:
    """Every import, type-only ones included, by which a module of capture/ names a front door."""
    return [f"{line}: {m} imports {imported}"
            for m, path in sorted(modules.items()) if folder_of(m) == "capture"
            for _m, imported, line in import_edges(m, path, modules, type_checking=True)
            if is_front_door(imported)]


def test_no_cycle_between_folders():
    """Subpackages and top-level modules as nodes, imports inside functions counted, imports
    for the type checker only not."""
    modules = package_modules()
    graph, where = folder_graph(modules)
    assert {"analysis", "capture", "plugin", "trace", "api", "cli"} <= set(graph)
    found = describe_cycles(graph, where)
    assert not found, "the package's folders import each other in a cycle:\n" + "\n".join(found)


def test_capture_imports_no_front_door():
    modules = package_modules()
    assert any(folder_of(m) == "capture" for m in modules)
    found = front_door_imports_of_capture(modules)
    assert not found, "capture/ imports a front door:\n" + "\n".join(found)


def test_the_folder_graph_sees_what_it_must_and_nothing_else():
    """The checks above can fail: a cycle between folders is named with the lines that close it,
    a function-level import is an edge, a ``TYPE_CHECKING`` import is not (its ``else`` is), and
    an import of ``api`` from capture/ is a front door."""
    modules = dict(package_modules())
    fake_capture = os.path.join(ROOT, PACKAGE, "capture", "fake.py")
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from ..cli import main\nelse:\n    from .. import causes\n"
              "def f():\n    from ..api import SessionReport\n")
    edges = {(b, line) for _a, b, line in import_edges(f"{PACKAGE}.capture.fake", fake_capture, modules, source)}
    where = os.path.relpath(fake_capture, ROOT)
    assert edges == {(f"{PACKAGE}.causes", f"{where}:5"), (f"{PACKAGE}.api", f"{where}:7")}
    with_types = {b for _a, b, _line in import_edges(f"{PACKAGE}.capture.fake", fake_capture, modules, source, True)}
    assert f"{PACKAGE}.cli.main" in with_types
    assert is_front_door(f"{PACKAGE}.api") and is_front_door(f"{PACKAGE}.plugin.routes") \
        and is_front_door(f"{PACKAGE}.notebook.ops") and not is_front_door(f"{PACKAGE}.batch")
    graph = {"analysis": {"records"}, "records": {"capture"}, "capture": {"analysis", "trace"}, "trace": set()}
    where_of = {("analysis", "records"): ["a.py:1"], ("records", "capture"): ["r.py:2"],
                ("capture", "analysis"): ["c.py:3", "c.py:9"], ("capture", "trace"): ["c.py:4"]}
    assert describe_cycles(graph, where_of) == [
        "cycle analysis -> records -> capture -> analysis (component: analysis, capture, records)\n"
        "  analysis -> records: a.py:1\n  records -> capture: r.py:2\n  capture -> analysis: c.py:3, c.py:9"]


@pytest.mark.parametrize("module,node", [(f"{PACKAGE}.analysis.rules", "analysis"), (f"{PACKAGE}.api", "api"),
                                         (PACKAGE, "__init__"), (f"{PACKAGE}.analysis", "analysis")])
def test_folder_of(module, node):
    assert folder_of(module) == node
