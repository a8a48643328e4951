"""The lowest versions ``setup.py`` declares, as pins: ``name==floor`` for each requirement.

Used by ``tests/run_min_versions.sh`` (the lowest-versions job: a resolver's
"lowest-direct" mode done with plain pip) and by ``tests/test_min_versions.py``.

    python tests/min_versions.py [EXTRA ...] [--exclude NAME,NAME] [--raw]   # one a line

``--raw`` prints the requirements as declared (for a resolver's lowest-direct mode, where
another package's pins may rule a floor out) instead of ``==floor`` pins.

Every requirement must have a floor (``>=X``): a requirement without one would let the job
install whatever is newest, so the floor it claims to test would not exist. Markers
(``; python_version...``) are kept on the pin.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Tuple

from support.paths import ROOT

_REQ = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def declared(setup_py: str = os.path.join(ROOT, "setup.py")) -> Dict:
    """The keyword arguments ``setup.py`` passes to ``setup()`` (run with ``setup``
    replaced, so nothing is built).

    Returns:
      dict with at least ``install_requires``, ``extras_require``, ``python_requires``.
    """
    import setuptools
    seen: Dict = {}
    real = setuptools.setup
    setuptools.setup = lambda **kw: seen.update(kw)
    try:
        code = compile(open(setup_py, encoding="utf-8").read(), setup_py, "exec")
        exec(code, {"__name__": "__main__", "__file__": setup_py})
    finally:
        setuptools.setup = real
    return seen


def floor_pin(requirement: str) -> str:
    """``name[extra]>=X[,<Y]; marker`` (or ``==X``) -> ``name[extra]==X; marker``.

    Raises:
      ValueError: the requirement has no ``>=`` floor.
    """
    m = _REQ.match(requirement)
    if not m:
        raise ValueError(f"cannot parse requirement {requirement!r}")
    name, extras, spec, marker = m.group(1), m.group(2) or "", m.group(3), m.group(4) or ""
    floors = [p.strip()[2:].strip() for p in spec.split(",") if p.strip()[:2] in (">=", "==")]  # == is its own floor
    if not floors:
        raise ValueError(f"requirement {requirement!r} in setup.py has no floor (>=X): "
                         "declare the lowest version a test has seen work")
    return f"{name}{extras}=={floors[0]}{' ' + marker if marker else ''}"


def _name(requirement: str) -> str:
    return _REQ.match(requirement).group(1).lower().replace("_", "-")


def pins(extras: List[str], exclude: Tuple[str, ...] = (), raw: bool = False) -> List[str]:
    """Pins for ``install_requires`` and the given extras, in setup.py's order, each
    package once (the first mention wins), without the packages named in ``exclude``;
    with ``raw``, the requirements as declared (each still checked for a floor)."""
    kw = declared()
    reqs = list(kw["install_requires"])
    for e in extras:
        reqs.extend(kw["extras_require"][e])
    out, names = [], {_name(x) for x in exclude}
    for r in reqs:
        name = _name(r)
        if name not in names:
            names.add(name)
            pin = floor_pin(r)
            out.append(r if raw else pin)
    return out


def python_floor() -> str:
    """The Python version ``python_requires`` declares (``>=3.11`` -> ``3.11``)."""
    return declared()["python_requires"].strip().lstrip(">=").strip()


def _main(argv: List[str]) -> List[str]:
    exclude: Tuple[str, ...] = ()
    if "--exclude" in argv:
        i = argv.index("--exclude")
        exclude = tuple(n for n in argv[i + 1].split(",") if n)
        argv = argv[:i] + argv[i + 2:]
    raw = "--raw" in argv
    return pins([a for a in argv if a != "--raw"], exclude, raw)


if __name__ == "__main__":
    try:
        print("\n".join(_main(sys.argv[1:])))
    except (ValueError, KeyError) as err:
        print(f"min_versions: {err}", file=sys.stderr)
        sys.exit(2)
