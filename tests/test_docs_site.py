"""The manual and the README's front page.

The manual is a MkDocs site built from ``docs/`` (``mkdocs.yml``; ``pip install '.[docs]'``).
The strict build fails on any warning: a page missing from the nav, a link to a page or an
``#anchor`` that does not exist, a generated part that cannot be made. The built site states
results, not the project's history, and each command's page is generated from the parser the
command runs. The README is a front page: short, and nothing in it points outside the
repository. The code blocks of both are run by ``tests/test_readme.py``.
"""
from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys

import pytest

from support.paths import ROOT

pytestmark = pytest.mark.docs

README = os.path.join(ROOT, "README.md")
#: The front page's length limit: what a visitor reads before choosing a page of the manual.
README_MAX_LINES = 300
#: Words of the project's history that user pages do not carry (development notes go to
#: commit messages): the built site must contain none of them, nor paths outside the repository.
HISTORY = re.compile(r"newcomer|\bissue \d+|\.\./shared", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The manual, built with ``mkdocs build --strict`` into a temporary folder."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        msg = "mkdocs is not installed: pip install -e '.[docs]' (tests/run.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    out = str(tmp_path_factory.mktemp("site"))
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", out], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return out


def _site_files(site):
    for dirpath, _dirs, files in os.walk(site):
        for f in files:
            if f.endswith((".html", ".json")):
                yield os.path.join(dirpath, f)


def test_the_manual_builds_strictly_and_states_no_history(site):
    assert os.path.isfile(os.path.join(site, "index.html"))
    found = []
    for path in _site_files(site):
        with open(path, encoding="utf-8") as f:
            for m in HISTORY.finditer(f.read()):
                found.append(f"{os.path.relpath(path, site)}: {m.group(0)!r}")
    assert not found, "the built site names the project's history or paths outside it:\n" + "\n".join(found[:20])


def test_each_command_page_lists_every_option_of_its_parser(site):
    """The command pages are generated from ``tfbneck``'s own parsers (docs/_hooks/generated.py):
    every option and positional argument ``tfbneck COMMAND --help`` lists is on its page."""
    from tfbneck_plugin.cli.main import _parser
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"analyze", "compare", "fleet", "watch", "trigger"}
    for name, parser in sub.choices.items():
        with open(os.path.join(site, "cli", name, "index.html"), encoding="utf-8") as f:
            page = f.read()
        words = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())  # the page's text
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            names = action.option_strings or [action.metavar or action.dest]
            for flag in names:
                assert f"<code>{flag}" in page, f"cli/{name}: {flag} is not on the page"
            if action.help and "%" not in action.help:
                assert " ".join(action.help.split()) in words, f"cli/{name}: the help of {names[0]} is not on the page"


def test_the_api_page_is_generated_from_the_docstrings(site):
    with open(os.path.join(site, "api", "index.html"), encoding="utf-8") as f:
        page = f.read()
    from tfbneck_plugin import api
    for name in ("api.analyze", "api.Report", "api.SessionReport", "comparison.compare.compare", "api.fleet",
                 "capture.callback.BottleneckProfiler", "capture.schedule.profile_steps",
                 "capture.steptime.SlowdownTrigger"):
        assert f'id="tfbneck_plugin.{name}"' in page, name
    first_line = api.analyze.__doc__.strip().splitlines()[0]
    assert first_line.split("``")[0].strip()[:30] in page


def test_the_readme_is_a_front_page():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    assert not [n for n, line in enumerate(lines, 1) if "../shared" in line]
    # Every link is a file of the repository (no ../, no absolute path) or a web address.
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"https?://", target) or target.startswith("#"):  # a web address, a heading of the README
            continue
        path = target.split("#")[0]
        assert path and not path.startswith(("/", "..")), f"README links outside the repository: {target}"
        assert os.path.exists(os.path.join(ROOT, path)), f"README links to {target}, which does not exist"
    # The two commands for a fresh machine, and the sections others keep up to date.
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install . && tfbneck analyze demo_logs" in text
    assert "\n## Tests\n" in text and "```bash\nbash tests/run.sh\n```" in text and "bash tests/run.sh --quick" in text
    assert text.count("<!-- bench_analyze:begin -->") == 1 and text.count("<!-- bench_analyze:end -->") == 1
