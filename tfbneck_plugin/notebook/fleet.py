"""The fleet report (:func:`tfbneck_plugin.fleet_view.report.build`) as self-contained HTML for
notebooks: the time per category over all sessions and per group (the notebook's stacked
bars, inline SVG), the runs ranked by recoverable time with the fix that recovers it (unknown
where the fix has no predicted worth, never 0), and the sessions without a report, each with
its one-line error. No script, nothing loaded; every string from a report goes through
:func:`html.escape` (run names come from folder names). No TensorFlow here."""
from __future__ import annotations

from typing import Dict

from ..fleet_view.render import TOP_FAILED, fmt_group_recoverable, fmt_recoverable
from .session import STYLE, _e, fmt_pct, kind_label, legend_html, mini_bar_svg, total_bar_svg

#: Runs the HTML lists (the DataFrame holds them all).
TOP_RUNS = 25


def _run_row(i: int, r: Dict) -> str:
    speed = r.get("speedup")
    return (f'<tr data-run="{_e(r.get("run"))}" data-fix="{_e(r.get("fix") or "")}"><td>{i}</td>'
            f"<td><code>{_e(r.get('run'))}</code></td>"
            f"<td>{_e(kind_label(r.get('bottleneck')))} <small>{_e(r.get('cause') or '')}</small></td>"
            f"<td>{_e(r.get('fix_title') or r.get('fix') or '-')}</td>"
            f"<td>{_e(f'{speed:.2f}x' if isinstance(speed, (int, float)) else '-')}</td>"
            f"<td>{_e(fmt_recoverable(r))}"
            f"{'' if r.get('length_known') else ' <small>(profiled)</small>'}</td></tr>")


def fleet_html(f: Dict) -> str:
    """The whole fleet report as one ``<div>``."""
    err = f["errors"]
    hours = f["accelerator_hours"]
    head = (f"<h3>tfbneck fleet: {f['sessions']} sessions in {f['runs_total']} runs</h3>"
            f"<p>{err['sessions']} without a report"
            + "".join(f", {_e(k)} {n}" for k, n in sorted(err["by_kind"].items()))
            + f"; skipped windows: {f['skipped_windows']['sessions']} sessions, "
            f"{f['skipped_windows']['in_trend_files']} in trend files. Accelerator-hours: "
            f"{hours['total']:.3f} over the {hours['runs_with_length']} of {hours['runs']} runs whose length "
            f"a trend file gives.</p>")
    kind = f.get("device_kind")  # the fleet's one device kind, if one: its compute named as analyze names it
    overall = (f"<h4>Where the time goes (share of the profiled steps)</h4>{total_bar_svg(f['categories_pct'], kind)}"
               f"{legend_html(f['categories_pct'], kind)}")
    groups = "".join(f"<tr><td><code>{_e(g['group'])}</code></td><td>{g['runs']}</td><td>{g['sessions']}</td>"
                     f"<td>{mini_bar_svg(g['categories_pct'], device_kind=kind)}</td>"
                     f"<td>{fmt_pct(g['categories_pct'].get('input'))}</td>"
                     f"<td>{_e(fmt_group_recoverable(g))}</td></tr>" for g in f["groups"])
    runs = "".join(_run_row(i, r) for i, r in enumerate(f["runs"][:TOP_RUNS], 1))
    more = len(f["runs"]) - TOP_RUNS
    notes = "".join(f"<li>{_e(n)}</li>" for n in f["basis"] + [f"warning: {p}" for p in f["problems"]])
    failed = f.get("failed") or []
    bad = "".join(f"<li><code>{_e(x['run'])}/{_e(x['session'])}</code>: {_e(x['error'])}</li>"
                  for x in failed[:TOP_FAILED])
    if failed:
        bad = (f"<h4>Sessions without a report ({min(TOP_FAILED, len(failed))} of {len(failed)} shown; "
               f"<code>f['failed']</code> holds them all)</h4><ul class='tfb-fleet-failed'>{bad}</ul>")
    return (f'<div class="tfbneck-report tfbneck-fleet">{STYLE}<div class="tfb-card">{head}{overall}'
            '<h4>Groups</h4><table class="tfb-table"><tr><th>group</th><th>runs</th><th>sessions</th>'
            "<th>time by category</th>"
            f"<th>input</th><th>recoverable</th></tr>{groups}</table>"
            '<h4>Fix these first</h4><table class="tfb-table tfb-fleet-runs"><tr><th>#</th><th>run</th>'
            "<th>verdict</th><th>fix</th>"
            f"<th>speedup</th><th>recoverable</th></tr>{runs}</table>"
            + (f"<p>and {more} more runs (<code>.to_dataframe()</code> holds them all)</p>" if more > 0 else "")
            + bad + (f"<ul>{notes}</ul>" if notes else "") + "</div></div>")
