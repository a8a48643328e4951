"""The diagnosis as self-contained HTML, for Jupyter, Colab and notebooks saved to HTML.

What the TensorBoard tab shows at a glance: the verdict card, the step-time breakdown
(an inline SVG chart), the tf.data stage table and the first recommendations with their
code. The HTML has no script and loads nothing, so it reads the same offline, with
JavaScript disabled and in a notebook exported to HTML. Chart colours are SVG attributes
(not CSS), so the chart keeps its colours where a notebook viewer strips ``<style>``.
Every string taken from a report goes through :func:`html.escape`: run, stage and event
names come from user code and file names. Labels and colours are the tab's
(``frontend/src/format.js``, ``frontend/src/style.css``), so both read alike.

The rendering functions take report dicts (the contract in the README, "The report"); the
rich objects that call them are :class:`tfbneck_plugin.api.Report` and
:class:`tfbneck_plugin.api.SessionReport`; the callback's display of each window
(``BottleneckProfiler(display=True)``) is :mod:`tfbneck_plugin.capture.display`. Nothing here
imports TensorFlow or IPython.
"""
from __future__ import annotations

import html
import math
from typing import Dict, Iterable, List, Optional

from .. import schema
from ..render.report import session_title as report_title
from .ops import ops_section
from ..schema import step_time_ms

#: Breakdown categories in drawing order (bottom of a stacked bar first), as the tab.
CATEGORIES = ["device_compute", "host_compute", "input", "host_to_device", "device_to_host",
              "collective", "kernel_launch", "idle"]

CATEGORY_COLORS = {
    "input": "#e8710a", "host_compute": "#f6bf26", "device_compute": "#1a73e8", "host_to_device": "#12b5cb",
    "device_to_host": "#0b8043", "collective": "#9334e6", "kernel_launch": "#e52592", "idle": "#c4c7cc",
}

#: The verdicts' names: the report's (:data:`tfbneck_plugin.schema.BOTTLENECK_LABELS`).
KIND_LABELS = schema.BOTTLENECK_LABELS

KIND_COLORS = {"cpu": "#e8710a", "device": "#188038", "io": "#a142f4", "network": "#1967d2",
               "unknown": "#80868b", "error": "#d93025"}

STAGE_CATEGORY_NAMES = {"compute": "compute", "file_read": "file read", "remote_read": "remote read",
                        "python": "Python", "buffer": "buffer"}

#: Most steps drawn in the per-step chart (a profiling window is at most 100 steps by
#: default; a longer trace shows its first steps and says so).
MAX_CHART_STEPS = 200
#: tf.data stages listed before "N more"; recommendations shown in full.
MAX_STAGES = 12
MAX_RECOMMENDATIONS = 3
#: A Report's sessions are unfolded up to this many; more start folded (``<details>``).
OPEN_SESSIONS = 6
#: Up to this many sessions a Report shows each one in full under its table; beyond, only
#: the table, each row's evidence and first fix folded in it (202 sessions in full were
#: 2.4 MB of HTML in one cell); ``r[i]`` or ``r["run/session"]`` shows one in full.
FULL_SESSIONS = 12

_TEXT = "#202124"
_MUTED = "#5f6368"

STYLE = """<style>
div.tfbneck-report{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;font-size:14px;line-height:1.45;
 color:#202124;max-width:980px;text-align:left}
div.tfbneck-report .tfb-card{background:#fff;color:#202124;border:1px solid #dadce0;border-radius:8px;
 padding:10px 14px;margin:8px 0}
div.tfbneck-report .tfb-h{margin:6px 0;font-size:14px;font-weight:600}
div.tfbneck-report .tfb-top{display:flex;gap:10px;align-items:center;flex-wrap:wrap}
div.tfbneck-report .tfb-kind{color:#fff;border-radius:12px;padding:2px 10px;font-weight:600;white-space:nowrap}
div.tfbneck-report .tfb-muted,div.tfbneck-report .tfb-meta{color:#5f6368;font-size:12px}
div.tfbneck-report .tfb-meta span{margin-right:14px}
div.tfbneck-report code{background:#f1f3f4;border-radius:3px;padding:0 3px;font-size:12px}
div.tfbneck-report pre{background:#f1f3f4;border-radius:4px;padding:6px 8px;overflow-x:auto;margin:4px 0}
div.tfbneck-report pre code{padding:0}
div.tfbneck-report .tfb-table{border-collapse:collapse;font-size:12px;border:none}
div.tfbneck-report .tfb-table th,div.tfbneck-report .tfb-table td{border:none;border-bottom:1px solid #e8eaed;
 padding:3px 8px;text-align:left;vertical-align:top;background:none}
div.tfbneck-report .tfb-table td.num,div.tfbneck-report .tfb-table th.num{text-align:right;white-space:nowrap}
div.tfbneck-report .tfb-table tr.tfb-blocking td{background:#fef3e8}
div.tfbneck-report .tfb-badge{background:#e8710a;color:#fff;border-radius:8px;padding:0 6px;margin-left:6px;
 font-size:11px}
div.tfbneck-report .tfb-stage-path{color:#5f6368;font-size:11px;word-break:break-all}
div.tfbneck-report .tfb-legend{list-style:none;padding:0;margin:4px 0;display:flex;flex-wrap:wrap;gap:4px 14px;
 font-size:12px}
div.tfbneck-report svg.tfb-chart{max-width:100%;height:auto}
div.tfbneck-report details>summary{cursor:pointer;font-weight:600;margin:6px 0}
div.tfbneck-report .tfb-error{border-color:#d93025}
div.tfbneck-report .tfb-scroll{overflow-x:auto}
div.tfbneck-report table.tfb-summary{width:100%}
div.tfbneck-report table.tfb-summary td{overflow-wrap:anywhere}
div.tfbneck-report table.tfb-summary details>summary{font-weight:400;margin:0}
div.tfbneck-report table.tfb-summary ul{margin:2px 0;padding-left:16px}
</style>"""


# ----------------------------------------------------------------------------------------
# Small formatters
# ----------------------------------------------------------------------------------------

def _e(value) -> str:
    """Escaped text (quotes too: the result may sit inside an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def _rich(text) -> str:
    """Escaped text with `backticked` parts as <code>, as the analyzer writes stage names."""
    parts = str(text if text is not None else "").split("`")
    return "".join(f"<code>{_e(p)}</code>" if i % 2 else _e(p) for i, p in enumerate(parts))


def _num(value) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def fmt_ms(value, digits: int = 1) -> str:
    """Milliseconds as the tab writes them: ``12.3 ms``, ``1.23 s`` from 1000 ms, ``–`` if unknown."""
    v = _num(value)
    if v is None:
        return "–"
    return f"{v / 1000:.2f} s" if abs(v) >= 1000 else f"{v:.{digits}f} ms"


def fmt_pct(value, digits: int = 1) -> str:
    """A percentage (0-100) with one decimal, ``–`` if unknown."""
    v = _num(value)
    return "–" if v is None else f"{v:.{digits}f}%"


#: A breakdown category's name, as the report names it (``category_labels``, from
#: :func:`tfbneck_plugin.schema.category_label`).
category_label = schema.category_label
#: A verdict's name, as the report names it (``bottleneck_label``).
kind_label = schema.bottleneck_label


def session_title(s: Dict) -> str:
    """``run/session`` of a report, as the CLI's table names it."""
    return report_title(s)


# ----------------------------------------------------------------------------------------
# The step-time breakdown as SVG
# ----------------------------------------------------------------------------------------

def _segments(pct: Dict) -> List:
    """(category, share 0-100) of the categories present, in drawing order."""
    out = []
    for c in CATEGORIES:
        v = _num((pct or {}).get(c))
        if v and v > 0:
            out.append((c, v))
    return out


def total_bar_svg(pct: Dict, device_kind: Optional[str], width: int = 640, height: int = 26) -> str:
    """The whole window's breakdown as one 100 % horizontal bar.

    Args:
      pct: ``breakdown_pct`` of a report (category -> % of step time, summing to ~100).
      device_kind: ``GPU``/``TPU``/``CPU``, for the label of ``device_compute``.
      width, height: size in CSS pixels (the SVG scales down with its container).
    Returns:
      An ``<svg>`` element; each segment has a ``<title>`` (hover text) and, when wide
      enough, its share written on it.
    """
    segs = _segments(pct)
    total = sum(v for _, v in segs) or 1.0
    parts, x = [], 0.0
    for c, v in segs:
        w = width * v / total
        label = f"{category_label(c, device_kind)}: {fmt_pct(v)}"
        parts.append(f'<g class="tfb-seg" data-category="{c}"><title>{_e(label)}</title>'
                     f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{CATEGORY_COLORS[c]}"/>')
        if w >= 44:
            fill = _TEXT if c in ("host_compute", "idle") else "#fff"
            parts.append(f'<text x="{x + w / 2:.2f}" y="{height / 2 + 4:.1f}" text-anchor="middle" font-size="12" '
                         f'fill="{fill}">{fmt_pct(v, 0)}</text>')
        parts.append("</g>")
        x += w
    return (f'<svg class="tfb-chart tfb-total-bar" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="Share of step time per category">{"".join(parts)}</svg>')


def _swatch(color: str) -> str:
    return (f'<svg width="10" height="10" viewBox="0 0 10 10" aria-hidden="true">'
            f'<rect width="10" height="10" fill="{color}"/></svg>')


def legend_html(pct: Dict, device_kind: Optional[str]) -> str:
    """The legend of the breakdown: swatch, category name and share."""
    items = "".join(f'<li data-category="{c}">{_swatch(CATEGORY_COLORS[c])} {_e(category_label(c, device_kind))} '
                    f'<strong>{fmt_pct(v)}</strong></li>' for c, v in _segments(pct))
    return f'<ul class="tfb-legend">{items}</ul>'


def _nice_step(top: float, ticks: int = 4) -> float:
    """A round tick spacing (1, 2 or 5 x 10^k) giving about ``ticks`` ticks up to ``top``."""
    raw = max(top, 1e-9) / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _step_column(it: Dict, x: float, bw: float, y0: float, scale: float, device_kind) -> str:
    """One step: stacked category rectangles, its total outlined, a hover title."""
    parts_ms = it.get("breakdown_ms") or {}
    dur = _num(it.get("duration_ms")) or 0.0
    lines = [f"Step {it.get('step')}: {fmt_ms(dur, 2)}"]
    rects, y = [], y0
    for c in CATEGORIES:
        v = _num(parts_ms.get(c)) or 0.0
        if v <= 0:
            continue
        h = v * scale
        y -= h
        rects.append(f'<rect x="{x:.2f}" y="{y:.2f}" width="{bw:.2f}" height="{h:.2f}" fill="{CATEGORY_COLORS[c]}"/>')
        lines.append(f"{category_label(c, device_kind)}: {fmt_ms(v, 2)}")
    outline = (f'<rect x="{x:.2f}" y="{y0 - dur * scale:.2f}" width="{bw:.2f}" height="{dur * scale:.2f}" '
               f'fill="none" stroke="{_TEXT}" stroke-width="0.8"/>')
    return f'<g class="tfb-step"><title>{_e("; ".join(lines))}</title>{"".join(rects)}{outline}</g>'


def steps_svg(items: List[Dict], device_kind: Optional[str], width: int = 640, height: int = 220) -> str:
    """Each step's time as a stacked column of its breakdown (ms), outlined at its total.

    Args:
      items: ``steps.items`` of a report: ``step``, ``duration_ms`` and ``breakdown_ms``
        (category -> ms). Only the first :data:`MAX_CHART_STEPS` are drawn.
      device_kind: for the category names in the hover titles.
      width, height: size in CSS pixels.
    Returns:
      An ``<svg>`` with a y axis in ms and step numbers under the columns.
    """
    items = list(items)[:MAX_CHART_STEPS]
    left, right, top, bottom = 52, 8, 10, 34
    pw, ph = width - left - right, height - top - bottom
    ymax = max([_num(it.get("duration_ms")) or 0.0 for it in items]
               + [sum(_num(v) or 0.0 for v in (it.get("breakdown_ms") or {}).values()) for it in items] + [1e-6])
    tick = _nice_step(ymax)
    ytop = math.ceil(ymax / tick - 1e-9) * tick
    scale, y0 = ph / ytop, top + ph
    out = []
    for k in range(round(ytop / tick) + 1):
        y = y0 - k * tick * scale
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e8eaed"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="{_MUTED}">'
                   f'{_e(_tick_label(k * tick))}</text>')
    band = pw / max(len(items), 1)
    every = max(1, math.ceil(len(items) / 16))
    for i, it in enumerate(items):
        x = left + i * band + band * 0.1
        out.append(_step_column(it, x, band * 0.8, y0, scale, device_kind))
        if i % every == 0:
            out.append(f'<text x="{x + band * 0.4:.2f}" y="{y0 + 14}" text-anchor="middle" font-size="11" '
                       f'fill="{_MUTED}">{_e(it.get("step"))}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 4}" text-anchor="middle" font-size="11" fill="{_MUTED}">'
               f'step</text><text x="12" y="{top + ph / 2}" font-size="11" fill="{_MUTED}" text-anchor="middle" '
               f'transform="rotate(-90 12 {top + ph / 2})">ms</text>')
    return (f'<svg class="tfb-chart tfb-steps-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="Time per step by category, ms">{"".join(out)}</svg>')


def _tick_label(v: float) -> str:
    return f"{v:g}" if v < 1e5 else f"{v:.3g}"


def mini_bar_svg(pct: Dict, width: int = 140, height: int = 12, device_kind: Optional[str] = None) -> str:
    """A small 100 % bar of a session's breakdown, for the one-row-per-session table
    (``device_kind``: for the label of ``device_compute``, :func:`category_label`)."""
    segs = _segments(pct)
    total = sum(v for _, v in segs) or 1.0
    rects, x = [], 0.0
    for c, v in segs:
        w = width * v / total
        rects.append(f'<rect x="{x:.2f}" width="{w:.2f}" height="{height}" fill="{CATEGORY_COLORS[c]}">'
                     f'<title>{_e(category_label(c, device_kind))}: {fmt_pct(v)}</title></rect>')
        x += w
    return (f'<svg class="tfb-chart tfb-mini-bar" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}">{"".join(rects)}</svg>')


# ----------------------------------------------------------------------------------------
# Sections of one session
# ----------------------------------------------------------------------------------------

def _meta(s: Dict) -> str:
    steps = s.get("steps") or {}
    st = steps.get("step_time_ms") or {}
    hosts = s.get("hosts") or []
    items = [("Host" + ("s" if len(hosts) > 1 else ""), ", ".join(map(str, hosts)) or "–")]
    if s.get("device_kind"):
        items.append(("Device", s["device_kind"]))
    items.append(("Steps", steps.get("count", 0)))
    if st:
        items.append(("Step time", (f"{fmt_ms(st.get('mean'))} mean · {fmt_ms(st.get('p50'))} p50 · "
                                    f"{fmt_ms(st.get('p90'))} p90")))
    if s.get("step_source"):
        items.append(("Steps from", str(s["step_source"]).split(" (")[0].replace("_", " ")))
    return '<div class="tfb-meta">' + "".join(f"<span>{_e(k)}: <strong>{_e(v)}</strong></span>"
                                               for k, v in items) + "</div>"


def _error_card(s: Dict) -> str:
    return (f'<section class="tfb-card tfb-verdict tfb-error" data-status="error" data-bottleneck="unknown">'
            f'<div class="tfb-top"><span class="tfb-kind" style="background:{KIND_COLORS["error"]}">Could not '
            f'analyse</span></div><p><code class="tfb-error-message">{_e(s.get("error"))}</code></p></section>')


def verdict_card(s: Dict) -> str:
    """The verdict: bottleneck, cause (and ``cause_text`` when the report has it), confidence,
    evidence, and where the steps came from. An error report gets its one-line error."""
    if s.get("status") != "ok":
        return _error_card(s)
    kind = str(s.get("bottleneck") or "unknown")
    cause = s.get("cause") or ""
    conf = _num(s.get("confidence"))
    out = [(f'<section class="tfb-card tfb-verdict" data-status="ok" data-bottleneck="{_e(kind)}" '
            f'data-cause="{_e(cause)}"><div class="tfb-top">'
            f'<span class="tfb-kind" style="background:{KIND_COLORS.get(kind, KIND_COLORS["unknown"])}">'
            f'{_e(s.get("bottleneck_label") or kind_label(kind))}</span><code class="tfb-cause-code">{_e(cause)}</code>')]
    if kind != "unknown" and conf is not None:
        out.append(f'<span class="tfb-confidence">confidence {round(100 * conf)}%</span>')
    out.append("</div>")
    if s.get("cause_text"):
        out.append(f'<p class="tfb-cause">{_rich(s["cause_text"])}</p>')
    out.append(fix_first_html(s))
    out.append(_meta(s))
    if not (s.get("steps") or {}).get("count"):
        out.append('<p class="tfb-muted"><strong>No training steps were found in this trace.</strong> The '
                   'breakdown covers the whole recorded window instead of individual steps.</p>')
    out.extend(f'<p class="tfb-muted">{_rich(w)}</p>' for w in s.get("warnings") or [])
    evidence = "".join(f"<li>{_rich(e)}</li>" for e in s.get("evidence") or [])
    out.append(f'<div class="tfb-h">Evidence</div><ul class="tfb-evidence">{evidence}</ul></section>')
    return "".join(out)


def _worth(r: schema.Recommendation, s: Dict) -> str:
    """A recommendation's worth: the report's string (``worth``)."""
    worth = r.get("worth")
    return worth if isinstance(worth, str) else schema.worth(r, (s.get("steps") or {}).get("time_per_batch_ms"))


def fix_first_html(s: Dict) -> str:
    """The verdict card's first fix: its title, worth and fix code, then its code snippet;
    "" without a recommendation."""
    fix = schema.first_fix(s)
    if not fix:
        return ""
    worth = _worth(fix, s)
    code = f'<pre><code>{_e(fix.get("code"))}</code></pre>' if fix.get("code") else ""
    return (f'<div class="tfb-fix-first" data-fix="{_e(fix.get("fix"))}"><div class="tfb-h">Fix first</div>'
            f'<strong class="tfb-fix-title">{_rich(fix.get("title"))}</strong> <code>{_e(fix.get("fix"))}</code>'
            + (f'<div class="tfb-worth">{_e(worth)}</div>' if worth else "") + f"{code}</div>")


def breakdown_section(s: Dict) -> str:
    """Where the step time goes: the 100 % bar with its legend, then one column per step."""
    steps = s.get("steps") or {}
    items = steps.get("items") or []
    kind = s.get("device_kind")
    out = ['<section class="tfb-card tfb-breakdown"><div class="tfb-h">Where the step time goes</div>',
           '<div class="tfb-muted">All steps together:</div>', total_bar_svg(s.get("breakdown_pct") or {}, kind),
           legend_html(s.get("breakdown_pct") or {}, kind)]
    if items:
        shown = min(len(items), MAX_CHART_STEPS)
        more = f" (the first {shown} of {len(items)})" if len(items) > shown else ""
        out.append(f'<div class="tfb-muted">Each column is one step{more}, outlined at its total time:</div>')
        out.append(steps_svg(items, kind))
    else:
        why = steps.get("why_none") or "this trace has no steps."
        out.append(f'<p class="tfb-muted">No per-step chart: {_rich(why)}</p>')
    out.append("</section>")
    return "".join(out)


def _stage_row(st: Dict) -> str:
    blocking = bool(st.get("blocking"))
    badge = '<span class="tfb-badge">blocking</span>' if blocking else ""
    par = st.get("parallelism")
    auto = st.get("autotune")
    return (f'<tr class="{"tfb-blocking" if blocking else ""}" data-stage="{_e(st.get("kind"))}">'
            f'<td><strong>{_e(st.get("kind"))}</strong>{badge}<div class="tfb-stage-path">{_e(st.get("name"))}</div></td>'
            f'<td>{_e(STAGE_CATEGORY_NAMES.get(str(st.get("category")), st.get("category") or ""))}</td>'
            f'<td class="num">{_e(st.get("calls", ""))}</td><td class="num">{fmt_ms(st.get("self_ms"), 2)}</td>'
            f'<td class="num">{fmt_ms(st.get("function_ms"), 2) if st.get("function_ms") else "–"}</td>'
            f'<td>{"–" if par is None else _e(par)}</td><td>{"–" if auto is None else _e(auto)}</td></tr>')


def stages_section(s: Dict) -> str:
    """The tf.data stage table (as the tab's): kind, path, calls, self and function time,
    parallelism, autotune; the blocking stage marked. At most :data:`MAX_STAGES` rows."""
    stages = (s.get("input_pipeline") or {}).get("stages") or []
    out = ['<section class="tfb-card tfb-stages"><div class="tfb-h">tf.data pipeline</div>']
    if not stages:
        out.append('<p class="tfb-muted">No tf.data pipeline in this PyTorch trace: what the DataLoader did is in '
                   'the evidence.</p></section>' if s.get("framework") == "pytorch" else
                   '<p class="tfb-muted">No tf.data iterators were recorded in this trace (the input is not a '
                   'tf.data pipeline, or it ran outside the profiled window).</p></section>')
        return "".join(out)
    head = "".join(f'<th class="{"num" if 2 <= i <= 4 else ""}">{t}</th>' for i, t in enumerate(
        ["Stage", "Kind", "Calls", "Self time", "Function time", "Parallelism", "Autotune"]))
    rows = "".join(_stage_row(st) for st in stages[:MAX_STAGES])
    out.append(f'<div class="tfb-scroll"><table class="tfb-table"><thead><tr>{head}</tr></thead>'
               f'<tbody>{rows}</tbody></table></div>')
    if len(stages) > MAX_STAGES:
        out.append(f'<p class="tfb-muted">{len(stages) - MAX_STAGES} more stages in the report '
                   f'(<code>input_pipeline.stages</code>).</p>')
    out.append("</section>")
    return "".join(out)


def recommendations_section(s: Dict) -> str:
    """The first :data:`MAX_RECOMMENDATIONS` recommendations: title, worth (predicted time per
    batch, speedup, range; or the best case), why here, detail, code snippet."""
    recs = s.get("recommendations") or []
    out = ['<section class="tfb-card tfb-recs"><div class="tfb-h">What to change</div>']
    if not recs:
        out.append('<p class="tfb-muted">No change to recommend from this trace.</p></section>')
        return "".join(out)
    out.append('<ol class="tfb-rec-list">')
    for r in recs[:MAX_RECOMMENDATIONS]:
        code = f'<pre><code>{_e(r.get("code"))}</code></pre>' if r.get("code") else ""
        worth = _worth(r, s)
        worth_html = f'<div class="tfb-worth">{_e(worth)}</div>' if worth else ""
        why = f'<div class="tfb-why"><em>Why here:</em> {_rich(r.get("why_here"))}</div>' if r.get("why_here") else ""
        out.append(f'<li class="tfb-rec"><strong>{_rich(r.get("title"))}</strong>{worth_html}{why}'
                   f'<div>{_rich(r.get("detail"))}</div>{code}</li>')
    out.append("</ol>")
    if len(recs) > MAX_RECOMMENDATIONS:
        out.append(f'<p class="tfb-muted">{len(recs) - MAX_RECOMMENDATIONS} more in the report '
                   f'(<code>recommendations</code>).</p>')
    out.append("</section>")
    return "".join(out)


def _session_body(s: Dict) -> str:
    if s.get("status") != "ok":
        return verdict_card(s)
    # As the tab: the verdict with its first fix, what to change, where the time goes, tf.data, operations.
    return verdict_card(s) + recommendations_section(s) + breakdown_section(s) + stages_section(s) + ops_section(s)


def session_html(s: Dict) -> str:
    """One session's report as a self-contained HTML fragment (style included, no script).

    Args:
      s: one session report (dict of the report contract).
    Returns:
      ``<div class="tfbneck-report">...</div>``: title, verdict card, breakdown chart,
      tf.data stages and recommendations.
    """
    title = (f'<div class="tfb-title"><strong>{_e(s.get("run"))}</strong> '
             f'<span class="tfb-muted">{_e(s.get("session"))}</span></div>')
    return f'<div class="tfbneck-report">{STYLE}{title}{_session_body(s)}</div>'


# ----------------------------------------------------------------------------------------
# Several sessions
# ----------------------------------------------------------------------------------------

def _why_folded(s: Dict) -> str:
    """A row's cause with its evidence and first fix folded under it (compact reports)."""
    evidence = "".join(f"<li>{_rich(e)}</li>" for e in s.get("evidence") or [])
    recs = s.get("recommendations") or []
    fix = (f'<div>Fix first: <strong>{_rich(recs[0].get("title"))}</strong>'
           f'{f" — {_e(_worth(recs[0], s))}" if _worth(recs[0], s) else ""}</div>') if recs else ""
    return (f'<details class="tfb-why"><summary><code>{_e(s.get("cause"))}</code></summary>'
            f'<ul class="tfb-evidence">{evidence}</ul>{fix}</details>')


def _summary_row(s: Dict, compact: bool = False) -> str:
    ok = s.get("status") == "ok"
    kind = str(s.get("bottleneck") or "unknown") if ok else "error"
    st = step_time_ms(s)
    conf = _num(s.get("confidence"))
    verdict = (s.get("bottleneck_label") or kind_label(kind)) if ok else "Could not analyse"
    fix = schema.first_fix(s) if ok else None
    worth = _worth(fix, s) if fix else ""
    fix_cell = (f'<strong>{_rich(fix.get("title"))}</strong> <code>{_e(fix.get("fix"))}</code>'
                + (f'<div class="tfb-worth">{_e(worth)}</div>' if worth else "")) if fix else ""
    cause = (_why_folded(s) if compact else f'<code>{_e(s.get("cause"))}</code>') if ok else _e(s.get("error"))
    # The breakdown comes right after the verdict: a narrow notebook cell must not clip it.
    return (f'<tr data-run="{_e(s.get("run"))}" data-bottleneck="{_e(kind)}">'
            f'<td>{_e(s.get("run"))}</td><td>{_e(s.get("session"))}</td>'
            f'<td><span class="tfb-kind" style="background:{KIND_COLORS.get(kind, KIND_COLORS["unknown"])}">'
            f'{_e(verdict)}</span></td><td class="tfb-fix-cell">{fix_cell}</td>'
            f'<td>{mini_bar_svg(s.get("breakdown_pct") or {}) if ok else ""}</td>'
            f'<td class="num">{fmt_pct((s.get("breakdown_pct") or {}).get("input")) if ok else ""}</td>'
            f'<td class="num">{fmt_ms(st) if ok else ""}</td>'
            f'<td class="num">{"" if conf is None or not ok else f"{round(100 * conf)}%"}</td>'
            f'<td>{cause}</td></tr>')


def report_html(sessions: Iterable[Dict], problems: Iterable[str] = ()) -> str:
    """Several sessions: a table with one row per session, then each session in full.

    Args:
      sessions: session reports (dicts of the report contract).
      problems: discovery warnings (folders that could not be searched...), one line each.
    Returns:
      A self-contained HTML fragment. Sessions are unfolded (``<details open>``, no script
      needed) up to :data:`OPEN_SESSIONS`; beyond that they start folded; beyond
      :data:`FULL_SESSIONS` only the table is shown, each row's evidence and first fix
      folded under its cause.
    """
    sessions = list(sessions)
    n = len(sessions)
    compact = n > FULL_SESSIONS
    head = "".join(f'<th class="{"num" if 5 <= i <= 7 else ""}">{t}</th>' for i, t in enumerate(
        ["Run", "Session", "Verdict", "Fix first", "Breakdown", "Input", "Step time", "Confidence", "Cause"]))
    rows = "".join(_summary_row(s, compact) for s in sessions)
    out = [(f'<div class="tfbneck-report">{STYLE}<div class="tfb-card"><div class="tfb-h">tfbneck: {n} session'
            f'{"" if n == 1 else "s"}</div><div class="tfb-scroll"><table class="tfb-table tfb-summary"><thead>'
            f'<tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>')]
    out.extend(f'<p class="tfb-muted">warning: {_e(p)}</p>' for p in problems)
    if compact:
        out.append(f'<p class="tfb-muted">{n} sessions: click a cause for its evidence; <code>r[i]</code> or '
                   '<code>r["run/session"]</code> shows one session in full.</p></div></div>')
        return "".join(out)
    out.append("</div>")
    unfold = " open" if n <= OPEN_SESSIONS else ""
    for s in sessions:
        kind = (s.get("bottleneck_label") or kind_label(s.get("bottleneck"))) if s.get("status") == "ok" \
            else "could not analyse"
        out.append(f'<details class="tfb-session"{unfold}><summary>{_e(session_title(s))}: {_e(kind)}</summary>'
                   f"{_session_body(s)}</details>")
    out.append("</div>")
    return "".join(out)

