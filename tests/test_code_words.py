"""Package code says what it does and why, not where it came from: no comment, docstring or
string of ``tfbneck_plugin`` names a newcomer, an issue number or a corpus pass. The source of a
threshold stays (a benchmark file, a measured figure, a paper, another tool); which trial,
issue or pass led to a line goes in its commit message and in docs/development.md.
"""
import os
import re

import pytest

from support.paths import ROOT

PKG = os.path.join(ROOT, "tfbneck_plugin")
#: "a newcomer's trial", "issue 24", "issues 15 and 24", "pass 11", "passes 10 and 11".
HISTORY = re.compile(r"newcomer|\bissues? #?\d+|\bpass(?:es)? \d+", re.I)


def history_words(root: str = PKG):
    """``(file relative to root, line number, word)`` for every history word in the package's
    source files (``.py`` and ``.c``)."""
    for folder, _dirs, files in os.walk(root):
        for name in sorted(files):
            if name.endswith((".py", ".c")):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        for m in HISTORY.finditer(line):
                            yield os.path.relpath(path, root), n, m.group(0)


def test_package_code_names_no_newcomer_issue_or_pass():
    found = [f"tfbneck_plugin/{rel}:{n}: {word!r}" for rel, n, word in history_words()]
    assert not found, ("package code names the project's history (state what the code does and why; "
                       "history goes in the commit message and docs/development.md):\n" + "\n".join(found))


@pytest.mark.parametrize("text, words", [
    ("# a newcomer's trial of issue 24", ["newcomer", "issue 24"]),
    ("(issues 15 and 24), corpus pass 12's run, Pass 13, passes 10 and 11", ["issues 15", "pass 12", "Pass 13",
                                                                           "passes 10"]),
    ("pass verbose=1, a single pass over the line, the backward pass, bypass 2", []),
])
def test_the_words_it_finds(text, words, tmp_path):
    (tmp_path / "m.py").write_text(text + "\n", encoding="utf-8")
    assert [w for _rel, _n, w in history_words(str(tmp_path))] == words
