"""Renderings of the fleet report (:func:`tfbneck_plugin.fleet_view.report.build`): JSON (the whole
dict), a terminal table, Markdown, and CSV (one row per run, ranked). Each names every session
without a report with its one-line error (the table and Markdown the first :data:`TOP_FAILED`;
the CSV in each run's ``error``: the latest one), and shows a recoverable time that is unknown as
unknown, never as 0. No TensorFlow here."""
from __future__ import annotations

import csv
import datetime
import io
import json
from typing import Dict, List

from ..analysis.breakdown import CATEGORIES
from ..schema import bottleneck_label
from ..schema import category_label as schema_label

#: Runs shown by the table and Markdown renderings (JSON and CSV hold them all).
TOP_RUNS = 20
#: Sessions without a report named by the table and Markdown renderings (the JSON names them all).
TOP_FAILED = 20
#: What the table says for a run whose first fix has no predicted worth (recoverable_ms None).
NO_MODEL = "no model"
#: The categories the groups' and days' tables show (the JSON and CSV have them all).
_SHOWN = ("input", "device_compute", "host_compute")
#: Columns of the CSV: one row per run, in rank order.
CSV_COLUMNS = ["rank", "run", "group", "status", "bottleneck", "cause", "fix", "fix_title", "fix_worth", "fix_basis", "speedup",
               "time_per_batch_ms", "predicted_time_per_batch_ms", "batches", "length_known", "recoverable_ms",
               "recoverable_hours", "fix_first", "window_kind", "window_trigger", "session", "session_time",
               "sessions", "errors", "error", "path"]


def fmt_duration(ms) -> str:
    """``ms`` in the unit that reads best: ms, s, min or h."""
    if not isinstance(ms, (int, float)):
        return "?"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.2f} h"


def fmt_recoverable(r: Dict) -> str:
    """A run's recoverable time as the table shows it: ``~`` before one counted halfway to a
    bound (``fix_basis`` ``bound``), :data:`NO_MODEL` where its first fix has no predicted
    worth (unknown, not 0), ``-`` for a run with no report."""
    rec = r.get("recoverable_ms")
    if isinstance(rec, (int, float)):
        return ("~" if r.get("fix_basis") == "bound" and rec > 0 else "") + fmt_duration(rec)
    return NO_MODEL if r.get("status") == "ok" else "-"


def fmt_group_recoverable(g: Dict) -> str:
    """A group's recoverable time: the sum of its runs' known ones, and how many runs have a
    first fix of no predicted worth; ``-`` when none of its runs has a report."""
    unknown = g.get("runs_worth_unknown") or 0
    if not isinstance(g.get("recoverable_ms"), (int, float)):
        return NO_MODEL if unknown else "-"
    return fmt_duration(g["recoverable_ms"]) + (f" (+{unknown} {NO_MODEL})" if unknown else "")


def iso_time(t) -> str:
    """Unix seconds as local ``YYYY-MM-DDTHH:MM:SS``, "" when unknown."""
    return datetime.datetime.fromtimestamp(t).isoformat(timespec="seconds") if t else ""


def run_row(rank: int, r: Dict) -> Dict:
    """One run as a flat row of :data:`CSV_COLUMNS`."""
    w = r.get("window") or {}
    given = r.get("recoverable_ms")
    rec = float(given) if isinstance(given, (int, float)) else None  # unknown stays empty, never 0
    row = {k: r.get(k) for k in CSV_COLUMNS if k in r}
    row.update(rank=rank, recoverable_ms=round(rec, 3) if rec is not None else None,
               recoverable_hours=round(rec / 3.6e6, 6) if rec is not None else None,
               window_kind=w.get("kind"), window_trigger=w.get("trigger"), session_time=iso_time(r.get("session_time")))
    return {k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS}


def to_json(fleet: Dict) -> str:
    return json.dumps(fleet, indent=2)


def to_csv(fleet: Dict) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for i, r in enumerate(fleet["runs"], 1):
        w.writerow(run_row(i, r))
    return buf.getvalue()


def _headline(f: Dict) -> str:
    err = f["errors"]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(err["by_kind"].items()))
    skipped = f["skipped_windows"]
    return (f"{f['sessions']} sessions in {f['runs_total']} runs; {err['sessions']} without a report"
            + (f" ({kinds})" if kinds else "") + f"; skipped windows: {skipped['sessions']} sessions, "
            f"{skipped['in_trend_files']} in trend files")


def verdict(r: Dict) -> str:
    """A run's verdict as the session views name it: ``CPU-bound / input_preprocessing``."""
    if r.get("status") != "ok":
        return "error"
    return f"{bottleneck_label(r.get('bottleneck'))} / {r.get('cause') or ''}"


def _table(header: List[str], rows: List[List], md: bool) -> List[str]:
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
    if md:
        esc = [[c.replace("|", "\\|") for c in r] for r in cells]
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in esc]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    line = lambda r: "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in cells]


def _sections(f: Dict, md: bool) -> List[str]:
    title = (lambda t: f"\n## {t}\n") if md else (lambda t: f"\n{t}")
    labels = f.get("category_labels") or {}
    category_label = lambda c: labels.get(c) or schema_label(c)  # noqa: E731 - as the fleet names it
    hours = f["accelerator_hours"]
    out = [title(f"Where the time goes (share of the profiled steps; accelerator-hours over the "
                 f"{hours['runs_with_length']} of {hours['runs']} runs whose length a trend file gives)")]
    cats = sorted(CATEGORIES, key=lambda c: -f["categories_pct"].get(c, 0.0))
    out += _table(["category", "share", "accel_hours"],
                  [[category_label(c), f"{f['categories_pct'].get(c, 0.0):.1f}%", f"{hours['by_category'].get(c, 0.0):.3f}"]
                   for c in cats], md)
    out.append(title("Verdicts (sessions / runs, a run by its latest session)"))
    out += _table(["bottleneck/cause", "sessions", "runs"],
                  [[k, v["sessions"], v["runs"]] for k, v in f["by_cause"].items()], md)
    out.append(title("Groups"))
    out += _table(["group", "runs", "sessions", "errors", "recoverable"] + [category_label(c) for c in _SHOWN],
                  [[g["group"], g["runs"], g["sessions"], g["errors"], fmt_group_recoverable(g)]
                   + [f"{g['categories_pct'].get(c, 0.0):.1f}%" for c in _SHOWN]
                   for g in f["groups"]], md)
    out.append(title(f"Fix these first (runs ranked by recoverable time; top {min(TOP_RUNS, len(f['runs']))} "
                     f"of {len(f['runs'])}; the fix and its worth as each run's report gives them; a change "
                     f"with no model counts halfway to its bound (~); '{NO_MODEL}': no predicted worth, so "
                     f"unknown, ranked after the runs with time to recover)"))
    out += _table(["#", "run", "verdict", "fix first", "worth", "recoverable", "batches", "length"],
                  [[i, r["run"], verdict(r), r["fix"] or "-", r.get("fix_worth") or "-",
                    fmt_recoverable(r), r["batches"] if r["batches"] is not None else "-",
                    "run" if r["length_known"] else "profiled"]
                   for i, r in enumerate(f["runs"][:TOP_RUNS], 1)], md)
    failed = f.get("failed") or []
    if failed:
        out.append(title(f"Sessions without a report (first {min(TOP_FAILED, len(failed))} of {len(failed)}; "
                         "--format json names them all)"))
        lines = [f"{x['run']}/{x['session']}: ERROR {x['error']}" for x in failed[:TOP_FAILED]]
        out += [("- " if md else "  ") + ln for ln in lines]
    out.append(title("Trend (sessions per day)"))
    out += _table(["date", "sessions", "errors"] + [category_label(c) for c in _SHOWN],
                  [[d["date"], d["sessions"], d["errors"]]
                   + [f"{d['categories_pct'].get(c, 0.0):.1f}%" for c in _SHOWN]
                   for d in f["trend"]], md)
    notes = f["basis"] + [f"warning: {p}" for p in f["problems"]]
    if notes:
        out.append(title("Notes"))
        out += [("- " if md else "  ") + n for n in notes]
    return out


def to_table(fleet: Dict) -> str:
    return "\n".join([f"tfbneck fleet: {_headline(fleet)}"] + _sections(fleet, md=False)) + "\n"


def to_markdown(fleet: Dict) -> str:
    return "\n".join(["# tfbneck fleet", "", _headline(fleet)] + _sections(fleet, md=True)) + "\n"


RENDERERS = {"json": to_json, "csv": to_csv, "table": to_table, "markdown": to_markdown}
