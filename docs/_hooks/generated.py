"""MkDocs hook: the manual's generated parts, made at build time so they cannot drift.

* ``<!-- cli: COMMAND -->`` (``analyze``, ``compare``, ``fleet``, ``watch``, ``trigger``, or
  ``tfbneck`` for the top level) becomes that command's reference, written from the
  argparse parser ``tfbneck`` itself runs (``tfbneck_plugin.cli.main._parser``, which adds the
  parsers of ``watch.py`` and ``trigger_log.py``): its usage line, description, and one row
  per argument with its help, choices and default.
* ``<!-- include: FILE NAME -->`` becomes the text of FILE (relative to the repository root)
  between its ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` lines: a table a benchmark
  writes into the README, shown in the manual without a second copy.

A marker that names no command or block fails the build with one line naming the page.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CLI = re.compile(r"^<!-- cli: (\S+) -->$", re.M)
_INCLUDE = re.compile(r"^<!-- include: (\S+) (\S+) -->$", re.M)


def _parsers() -> dict:
    """``{"tfbneck": the top-level parser, "analyze": its analyze parser, ...}``."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tfbneck_plugin.cli.main import _parser
    top = _parser()
    found = {"tfbneck": top}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help with argparse's ``%(default)s``-style fields filled in, as ``--help`` prints it."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = parser.prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return action.help % params


def _text(text: str) -> str:
    """Help text as Markdown shows it literally: ``<run>`` is not an HTML tag, ``*`` and ``_`` not emphasis."""
    for char in "\\*_[]`":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|").replace("\n", " ")


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        takes = ""
    elif action.metavar:
        takes = f" {action.metavar}"
    elif action.choices:  # as --help writes it: --format {json,table}
        takes = " {" + ",".join(map(str, action.choices)) + "}"
    else:
        takes = f" {action.dest.upper()}"
    return ", ".join(f"`{flag}{takes}`" for flag in action.option_strings)


def cli_reference(name: str, parsers: dict) -> str:
    """The Markdown reference of one command, from its parser."""
    parser = parsers[name]
    # argparse indents the usage's continuation lines under the text after "usage: ".
    lines = parser.format_usage().strip().splitlines()
    usage = "\n".join([lines[0].removeprefix("usage: ")] + [line[len("usage: "):] for line in lines[1:]])
    out = ["```text", usage, "```", ""]
    if parser.description:
        out += [_text(parser.description), ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                title = next((a.help for a in action._choices_actions if a.dest == sub_name), "") or ""
                rows.append(f"| [`{sub_name}`]({sub_name}.md) | {_cell(title)} | |")
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        default = ""
        if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS):
            default = f"`{action.default}`"
        rows.append(f"| {_argument(action)} | {_cell(_help(parser, action))} | {default} |")
    if rows:
        out += ["| argument | meaning | default |", "|---|---|---|"] + rows
    return "\n".join(out) + "\n"


def include_block(path: str, name: str) -> str:
    """The lines of ``path`` between ``<!-- name:begin -->`` and ``<!-- name:end -->``."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{path} has no single '{begin}' ... '{end}' block")
    return text[text.index(begin) + len(begin):text.index(end)].strip("\n") + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    """Replace the page's generated markers (MkDocs calls this for every page)."""
    if "<!-- cli: " in markdown:
        parsers = _parsers()

        def cli(m):
            if m.group(1) not in parsers:
                raise ValueError(f"{page.file.src_path}: no tfbneck command {m.group(1)!r} "
                                 f"(known: {', '.join(sorted(parsers))})")
            return cli_reference(m.group(1), parsers)
        markdown = _CLI.sub(cli, markdown)
    return _INCLUDE.sub(lambda m: include_block(m.group(1), m.group(2)), markdown)
