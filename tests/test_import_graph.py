"""The package's import graph, read from the source with ``ast``: imports inside functions
count as much as those at the top (an import deferred to call time is still a dependency,
and a cycle through it is one that only shows when the call happens).

An edge goes from a module to each package module it names: ``from .x import y`` names
``x`` (or ``x.y`` when that is a module), ``from .. import __version__`` names the package
``__init__``. Graph cycles are found with Tarjan's strongly connected components.
"""
import ast
import os
from typing import Dict, List, Set

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
