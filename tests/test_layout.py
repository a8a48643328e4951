"""The package's layout shows its architecture: features are packages (``analysis/``, ``capture/``,
``cli/``, ``comparison/``, ``fleet_view/``, ``notebook/``, ``plugin/``, ``render/``, ``system/``,
``trace/``, ``watch/``), and the top level keeps only what every feature shares (the report's
types, the driver, the cache, the run records, the errors). A top level that grows past a
dozen modules is a flat list again, where a reader cannot tell features from shared parts.

No class is longer than 350 lines (:data:`MAX_CLASS_LINES`): a class that grows past it holds
several concepts on one ``self`` and is to be split by concept (collaborators with explicit
inputs), not trimmed to fit.
"""
import ast
import os

from test_import_graph import PACKAGE, ROOT

#: Modules at the package's top level that hold no feature: its ``__init__`` (the lazy public
#: names), ``__main__`` (``python -m``) and ``version``.
NOT_COUNTED = {"__init__.py", "__main__.py", "version.py"}

#: At most this many other modules at the top level.
MAX_TOP_LEVEL_MODULES = 12
#: Lines of a class, from its ``class`` line to its last line, docstring included.
MAX_CLASS_LINES = 350


def top_level_modules(root: str = ROOT) -> list:
    """The ``.py`` files directly in the package folder, less :data:`NOT_COUNTED`, sorted."""
    folder = os.path.join(root, PACKAGE)
    return sorted(f for f in os.listdir(folder) if f.endswith(".py") and f not in NOT_COUNTED)


def test_the_top_level_holds_at_most_twelve_modules():
    found = top_level_modules()
    assert "api.py" in found and "batch.py" in found  # it read the package folder
    assert len(found) <= MAX_TOP_LEVEL_MODULES, \
        f"{len(found)} modules at the top level of {PACKAGE}/ (at most {MAX_TOP_LEVEL_MODULES}): {found}"


def test_every_feature_folder_is_a_package():
    """A folder of modules without ``__init__.py`` is a namespace package: importable, but
    invisible to the checks of the import graph and to the API pages."""
    folder = os.path.join(ROOT, PACKAGE)
    bare = [d for d in sorted(os.listdir(folder))
            if os.path.isdir(os.path.join(folder, d)) and d != "__pycache__"
            and any(f.endswith(".py") for f in os.listdir(os.path.join(folder, d)))
            and not os.path.isfile(os.path.join(folder, d, "__init__.py"))]
    assert not bare, f"folders of modules without an __init__.py: {bare}"


def class_lengths(root: str = ROOT) -> dict:
    """``"<path from the package>:<class>" -> lines`` of every class (nested ones too) in
    every ``.py`` file under the package."""
    out = {}
    for folder, _dirs, files in os.walk(os.path.join(root, PACKAGE)):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
            rel = os.path.relpath(path, os.path.join(root, PACKAGE))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    out[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_no_class_is_longer_than_350_lines():
    lengths = class_lengths()
    callback = os.path.join("capture", "callback.py") + ":BottleneckProfiler"
    assert callback in lengths, f"{callback} not found: the walk did not read the package"
    long = sorted(f"{where}:{n}" for where, n in lengths.items() if n > MAX_CLASS_LINES)
    assert not long, f"classes longer than {MAX_CLASS_LINES} lines (file:class:lines): {long}"
