"""The report: the JSON contract and its renderings (table, CSV, Markdown).

``build_report(sessions)`` wraps session reports (:class:`tfbneck_plugin.schema.SessionDict`, from
:mod:`tfbneck_plugin.batch`) into the contract's top level ``{"version", "sessions"}``. The renderers
only format that value, reading each session through :mod:`tfbneck_plugin.schema`.
"""
from __future__ import annotations

import csv
import io
import json
import re
import textwrap
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .. import schema
from ..analysis.breakdown import CATEGORIES
from ..version import __version__

#: Columns of the CSV and table renderings (one row per session). :func:`row` also gives
#: ``path``, the session folder (or, for a PATH that could not be searched, the PATH): the
#: table and the Markdown show it last, the CSV among :data:`EXTRA_COLUMNS`, so that two runs
#: of the same name under different PATHs stay apart.
COLUMNS = ["run", "session", "hosts", "status", "device_kind", "step_source", "steps", "step_ms",
           "bottleneck", "cause", "confidence", "input_pct", "blocking_stage", "error"]
#: The other breakdown categories' shares (%), after ``COLUMNS`` in the CSV (``input_pct``
#: is one of ``COLUMNS``).
PCT_COLUMNS = [f"{c}_pct" for c in CATEGORIES if c != "input"]
#: Columns the CSV and the DataFrame add after the breakdown shares: the fix to make first
#: (its code), its predicted speedup (empty without a model) and its worth in words (the
#: report's ``worth``, with or without a model), the time per batch (not per execution), the window that
#: recorded the session (from the run's trend file), its folder and when it was recorded.
EXTRA_COLUMNS = ["fix_first", "fix_speedup", "fix_worth", "time_per_batch_ms", "window_kind", "window_trigger", "path",
                 "session_time"]
#: Every CSV column: the CLI's ``--format csv``, the Beam pipeline's CSV, ``Report.to_dataframe``.
CSV_COLUMNS = COLUMNS + PCT_COLUMNS + EXTRA_COLUMNS


def build_report(sessions: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The contract's top level: ``{"version", "sessions"}``."""
    return {"version": __version__, "sessions": sessions}


def row(s: schema.Report) -> Dict:
    """One session as a flat row of ``COLUMNS`` and ``path``. A session that could not be analysed has
    ``bottleneck`` ``error`` and its ``error_kind`` as ``cause`` (its JSON keeps
    ``bottleneck: unknown``; a row that said ``unknown`` would read as a verdict)."""
    step_ms, input_pct = schema.step_time_ms(s), schema.share_pct(s, "input")
    failed = s.get("status") != "ok"
    return {
        "run": s.get("run"), "session": s.get("session"), "hosts": ",".join(s.get("hosts") or []),
        "status": s.get("status"), "device_kind": s.get("device_kind", ""),
        "step_source": s.get("step_source", "none"), "steps": (s.get("steps") or {}).get("count", 0),
        "step_ms": "" if step_ms is None else step_ms,
        "bottleneck": "error" if failed else s.get("bottleneck", "unknown"),
        "cause": s.get("error_kind", "") if failed else s.get("cause", ""), "confidence": s.get("confidence", ""),
        "input_pct": "" if input_pct is None else input_pct, "blocking_stage": schema.blocking_stage_kind(s),
        "error": s.get("error", ""), "path": s.get("path", ""),
    }


def session_title(s: schema.Report) -> str:
    """``run/session`` of a report; the PATH alone for a PATH that could not be searched."""
    return f"{s.get('run')}/{s.get('session')}" if s.get("session") else str(s.get("run"))


def extra_row(s: schema.Report) -> Dict:
    """One session's :data:`EXTRA_COLUMNS` ("" when unknown); ``session_time`` as local
    ``YYYY-MM-DDTHH:MM:SS``."""
    import datetime
    fix = schema.first_fix(s) or {}
    window = s.get("window") or {}
    t = s.get("session_time")
    values = {"fix_first": fix.get("fix"), "fix_speedup": (fix.get("predicted") or {}).get("speedup"),
              "fix_worth": fix.get("worth"),
              "time_per_batch_ms": (s.get("steps") or {}).get("time_per_batch_ms"),
              "window_kind": window.get("kind"), "window_trigger": window.get("trigger"), "path": s.get("path"),
              "session_time": datetime.datetime.fromtimestamp(t).isoformat(timespec="seconds")
              if isinstance(t, (int, float)) and t > 0 else None}
    return {k: "" if v is None else v for k, v in values.items()}


def csv_row(s: schema.Report) -> Dict:
    """One session as a row of ``CSV_COLUMNS`` (a share missing from the report is "")."""
    r = row(s)
    pct = s.get("breakdown_pct") or {}
    r.update({f"{c}_pct": pct.get(c, "") for c in CATEGORIES if c != "input"})
    r.update(extra_row(s))
    return r


def to_json(report: Mapping[str, Any]) -> str:
    """The report as indented JSON (the contract)."""
    return json.dumps(report, indent=2, sort_keys=False)


def to_csv(report: Mapping[str, Any]) -> str:
    """One CSV row per session: ``COLUMNS`` plus every breakdown share (%)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for s in report["sessions"]:
        w.writerow(csv_row(s))
    return buf.getvalue()


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters in its middle: a session's name begins with its
    date and ends with its steps and kind (``..._steps13013-13054_slowdown``), both worth
    keeping."""
    if len(text) <= width:
        return text
    head = (width - 3) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head):]


def _cell(v) -> str:
    return "" if v is None else str(v)


def _batch_ms(s: schema.Report) -> str:
    """The time per batch (ms, 3 significant digits), the figure rows of runs with different
    ``steps_per_execution`` share: a traced step of k batches is k times one batch's time."""
    v = (s.get("steps") or {}).get("time_per_batch_ms")
    return "" if not isinstance(v, (int, float)) else (f"{v:.3g}" if v < 1000 else f"{v:.0f}")  # never 1.17e+03


#: The text table's columns, in order.
TABLE_COLUMNS = ["run", "session", "status", "device_kind", "steps", "batch_ms", "step_source", "bottleneck", "cause",
                 "confidence", "fix_first", "input_pct", "blocking_stage", "path"]
#: The columns a terminal too narrow for the whole table loses, first to last; the verdict's
#: columns (run, session, batch_ms, bottleneck, cause, confidence, fix_first) are always shown.
#: ``path`` goes only while each row's run and session tell it apart, ``status`` only while
#: every row is ``ok``.
NARROW_DROPS = ["path", "step_source", "device_kind", "blocking_stage", "status", "steps", "input_pct"]


def _droppable(col: str, rows: List[Dict]) -> bool:
    if col == "path":
        return len({(r["run"], r["session"]) for r in rows}) == len(rows)
    if col == "status":
        return all(r["status"] == "ok" for r in rows)
    return True


#: The narrowest the run and session columns are cut to (in their middle, :func:`_fit`) when a
#: terminal is too narrow for the table without its optional columns; there a session is named
#: by its time and steps, without its date (the verdict lines under the table name each in full).
NARROWEST = {"session": 18, "run": 10}


def _widths(rows: List[Dict], cols: List[str]) -> Dict[str, int]:
    # The path goes last and whole: it is what tells two rows of the same run name apart.
    return {c: min(max(len(c), *(len(_cell(r[c])) for r in rows)) if rows else len(c), 40 if c != "path" else 10**6)
            for c in cols}


def _narrowed(widths: Dict[str, int], width: int) -> Dict[str, int]:
    """``widths`` with the session, then the run, column cut (to :data:`NARROWEST` at least)
    until the table's line fits ``width``."""
    out = dict(widths)
    over = sum(out.values()) + 2 * (len(out) - 1) - width
    for col, least in NARROWEST.items():
        if over <= 0:
            break
        cut = min(over, max(out[col] - max(least, len(col)), 0))
        out[col] -= cut
        over -= cut
    return out


_SESSION_DATE = re.compile(r"^\d{4}_\d{2}_\d{2}_(?=\d{2}_\d{2}_\d{2})")


def _table_lines(rows: List[Dict], cols: List[str], width: Optional[int] = None) -> List[str]:
    if width is not None:  # a narrow terminal: sessions by their time and steps (their date is in the lines below)
        rows = [dict(r, session=_SESSION_DATE.sub("", _cell(r["session"]))) for r in rows]
    widths = _widths(rows, cols)
    if width is not None:
        widths = _narrowed(widths, width)
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip(), "  ".join("-" * widths[c] for c in cols)]
    for r in rows:
        lines.append("  ".join(_fit(_cell(r[c]), widths[c]).ljust(widths[c]) for c in cols).rstrip())
    return lines


def _wrapped(line: str, width: Optional[int]) -> List[str]:
    """``line`` folded at word boundaries to ``width`` columns; an item's (``  - ``) continuation
    lines under its text, another line's 4 deeper than it (below the fix's code, indented 6,
    for the lines around it); as it is without a width."""
    if width is None or len(line) <= width:
        return [line]
    lead = len(line) - len(line.lstrip(" "))
    hang = lead + 2 if line[lead:].startswith("- ") else lead + 4
    return textwrap.wrap(line, width, subsequent_indent=" " * hang, break_long_words=False,
                         break_on_hyphens=False) or [line]


def to_table(report: Mapping[str, Any], width: Optional[int] = None) -> str:
    """A fixed-width table for terminals, then the evidence of each session.

    Args:
      report: :func:`build_report`'s dict.
      width: the terminal's columns, or None (a file or a pipe: every column, lines unfolded).
        With a width, the table leaves out :data:`NARROW_DROPS` columns until it fits (a line
        after it names them) and the evidence is folded to the width.
    """
    rows = [dict(row(s), fix_first=(schema.first_fix(s) or {}).get("fix") or "", batch_ms=_batch_ms(s))
            for s in report["sessions"]]
    cols = list(TABLE_COLUMNS)
    table = _table_lines(rows, cols)
    left_out = []
    for col in NARROW_DROPS:
        if width is None or max(len(x) for x in table) <= width:
            break
        if _droppable(col, rows):
            cols.remove(col)
            left_out.append(col)
            table = _table_lines(rows, cols)
    if width is not None and max(len(x) for x in table) > width:
        table = _table_lines(rows, cols, width)
    lines = table
    if left_out:
        lines += _wrapped(f"(left out to fit {width} columns: {', '.join(left_out)}; "
                          "--format json, csv or markdown, or a wider terminal, shows them)", width)
    lines.append("")
    for s in report["sessions"]:
        title = session_title(s)
        if s.get("status") != "ok":  # one line, never folded: the message is searched for as it is
            lines.append(f"{title}: ERROR {s.get('error')}")
            continue
        body = [verdict_line(s), *warning_lines(s), *fix_first_lines(s), *(f"  - {e}" for e in s.get("evidence", [])),
                *no_system_line(s), *breakdown_line(s), *worker_lines(s)]
        for line in body:  # the fix's code (indented 6) is never folded: it is copied as it is
            lines.extend([line] if line.startswith(CODE_INDENT) else _wrapped(line, width))
        lines.append("")
    return "\n".join(lines)


def verdict_line(s: schema.Report) -> str:
    """``run/session: CPU-bound (input_preprocessing, confidence 0.8)``: the verdict's label
    as the report words it (``bottleneck_label``), its cause code and confidence."""
    label = s.get("bottleneck_label") or schema.bottleneck_label(s.get("bottleneck"))
    return f"{session_title(s)}: {label} ({s.get('cause')}, confidence {s.get('confidence')})"


def fix_line(fix: schema.Recommendation) -> str:
    """``Title — worth [fix code]``: the first fix as every text view shows it; the worth is
    the report's string (``worth``), never worded again."""
    worth = fix.get("worth") or ""
    return f"{fix.get('title')}" + (f" — {worth}" if worth else "") + f" [{fix.get('fix')}]"


#: The indent of the first fix's code under it in the text table.
CODE_INDENT = " " * 6


def fix_first_lines(s: schema.Report) -> List[str]:
    """The table's lines for the first fix, right under the verdict: its title, worth and
    code name, why it fits this run, and its code indented. [] without a recommendation."""
    fix = schema.first_fix(s)
    if not fix:
        return []
    out = [f"  fix first: {fix_line(fix)}"]
    if fix.get("why_here"):
        out.append(f"    why here: {fix['why_here']}")
    if fix.get("code"):
        out.extend(f"{CODE_INDENT}{line}" for line in str(fix["code"]).splitlines())
    return out


def no_system_line(s: schema.Report) -> List[str]:
    """A line for a session without system metrics (no ``tfbneck_system_metrics.json`` beside
    its trace: a trace not made by BottleneckProfiler, or copied without its sidecar): the
    evidence then never says what the CPU, disks and network did, and a reader should know
    that the verdict and the advice were made without them. [] when the session has them."""
    if s.get("system_metrics") or s.get("kind") in ("system_only", "job"):
        return []
    if s.get("framework") == "pytorch" and not s.get("backend"):  # torch.profiler's own trace: no sidecar is made
        return ["  - No system metrics beside this trace (torch.profiler records none): what the CPU, disks and "
                "network did is unknown; the verdict and the advice come from the trace alone."]
    return ["  - No system metrics beside this trace (tfbneck_system_metrics.json, which BottleneckProfiler "
            "writes): what the CPU, disks and network did is unknown; the verdict and the advice come from "
            "the trace alone."]


def warning_lines(s: schema.Report) -> List[str]:
    """The session's warnings (``warnings``: a host whose trace could not be read beside the
    others, a window cut short...), one line each under the verdict."""
    return [f"  warning: {w}" for w in s.get("warnings") or []]


def breakdown_line(s: schema.Report) -> List[str]:
    """``  where the time goes: Waiting for input 72.6%, ...``: the breakdown shares named as
    the report names them (``category_labels``), largest first; [] without a breakdown."""
    pct = s.get("breakdown_pct") or {}
    labels = s.get("category_labels") or {}
    parts = [f"{labels.get(c) or schema.category_label(c, s.get('device_kind'))} {v:.1f}%"
             for c, v in sorted(pct.items(), key=lambda kv: -kv[1]) if isinstance(v, (int, float)) and v >= 0.05]
    return [f"  where the time goes: {', '.join(parts)}"] if parts else []


def _share(v) -> str:
    return f"{v:.1f}%" if isinstance(v, (int, float)) else ""


def worker_lines(s: schema.Report) -> List[str]:
    """The table's lines for a report with several hosts or workers (``per_host``): one per
    worker with its step time, its own report's verdict, its limit outside collectives and
    how long it kept the others waiting; the straggler marked ``*``. [] for one host."""
    rows = s.get("per_host") or []
    if not rows:
        return []
    out = ["  workers (* = the straggler the others wait for):"]
    width = max(len(str(r.get("host"))) for r in rows)
    for r in rows:
        own = r.get("own_limit") or {}
        own_text = f"  own limit {own['bottleneck']}/{own['cause']}" if own else ""
        waits = (f"  kept others waiting {_share(r['kept_others_waiting_pct'])} (last in {r.get('last_in_steps')} "
                 f"of {r.get('matched_steps')} steps)" if r.get("kept_others_waiting_pct") is not None else "")
        step = r.get("step_time_ms")
        out.append(f"  {'*' if r.get('straggler') else ' '} {str(r.get('host')).ljust(width)}  "
                   f"{(f'{step:.1f} ms' if isinstance(step, (int, float)) else '?').rjust(9)}  "
                   f"{r.get('bottleneck')}/{r.get('cause') or ''}{own_text}{waits}".rstrip())
    return out


def to_markdown(report: Mapping[str, Any]) -> str:
    """A Markdown table of the sessions, then each session's verdict, evidence and recommendations."""
    cols = ["run", "session", "status", "bottleneck", "cause", "confidence", "steps", "batch_ms", "input_pct",
            "blocking_stage", "step_source", "path"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for s in report["sessions"]:
        r = dict(row(s), batch_ms=_batch_ms(s))
        out.append("| " + " | ".join(_cell(r[c]).replace("|", "\\|") for c in cols) + " |")
    out.append("")
    for s in report["sessions"]:
        out.append(f"### {session_title(s)}")
        if s.get("status") != "ok":
            out.append(f"**Error:** {s.get('error')}\n")
            continue
        label = s.get("bottleneck_label") or schema.bottleneck_label(s.get("bottleneck"))
        out.append(f"**{label}** ({s.get('cause')}, confidence {s.get('confidence')})\n")
        fix = schema.first_fix(s)
        if fix:
            out.append(f"**Fix first:** {fix_line(fix)}\n")
        out.extend(f"- {e}" for e in s.get("evidence", []))
        out.extend(f"-{line[1:]}" for line in breakdown_line(s))
        out.extend(_worker_table(s))
        for r in s.get("recommendations") or []:
            worth = r.get("worth") or ""
            out.append(f"\n**{r['title']}**" + (f" — {worth}" if worth else "") + f": {r['detail']}")
            if r.get("why_here"):
                out.append(f"\n*Why here:* {r['why_here']}")
            if r.get("code"):
                out.append(f"\n```python\n{r['code']}\n```")
        out.append("")
    return "\n".join(out)


def _worker_table(s: schema.Report) -> List[str]:
    rows = s.get("per_host") or []
    if not rows:
        return []
    out = ["", "| worker | step_ms | verdict | own limit | kept others waiting | straggler |", "|---|---|---|---|---|---|"]
    for r in rows:
        own = r.get("own_limit") or {}
        cells = [r.get("host"), r.get("step_time_ms"), f"{r.get('bottleneck')} / {r.get('cause') or ''}",
                 f"{own['bottleneck']} / {own['cause']}" if own else "", _share(r.get("kept_others_waiting_pct")),
                 "yes" if r.get("straggler") else ""]
        out.append("| " + " | ".join(_cell(c).replace("|", "\\|") for c in cells) + " |")
    return out


RENDERERS = {"json": to_json, "csv": to_csv, "table": to_table, "markdown": to_markdown}
