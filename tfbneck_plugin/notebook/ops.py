"""The notebook display's top-ops table (as the tab's, under the breakdown): the costliest
ops of a session report's ``top_ops``, with the numbers of the JSON as they are, and the
costliest op types of each place (``op_summary.by_type``). HTML fragments, no script."""
from __future__ import annotations

import html
from typing import Dict

#: Rows shown (the report keeps more: ``top_ops``).
MAX_OPS = 10
WHERE_LABEL = {"device": "device", "host": "host", "input_pipeline": "tf.data"}


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _row(r: Dict) -> str:
    kernels = ", ".join(r.get("kernels") or [])
    where = WHERE_LABEL.get(str(r.get("where")), str(r.get("where")))
    return (f'<tr data-where="{_e(r.get("where"))}" data-op="{_e(r.get("name"))}">'
            f'<td><code>{_e(r.get("name"))}</code>'
            + (f'<div class="tfb-stage-path">{_e(kernels)}</div>' if kernels else "") +
            f'</td><td>{_e(r.get("type"))}</td><td>{_e(where)}</td>'
            f'<td class="num">{r.get("self_ms_per_step", 0):.3f}</td><td class="num">{r.get("pct", 0):.2f}</td>'
            f'<td class="num">{r.get("count_per_step", 0):g}</td></tr>')


def ops_section(s: Dict) -> str:
    """The top-ops table: name (and kernels), type, where, self ms per step, % (of the step;
    device ops: of the device's busy time), calls per step; at most :data:`MAX_OPS` rows."""
    rows = (s.get("top_ops") or [])[:MAX_OPS]
    summary = s.get("op_summary") or {}
    out = ['<section class="tfb-card tfb-ops"><div class="tfb-h">Which operations take the time</div>']
    if not rows:
        ops = {"pytorch": "PyTorch ops", "jax": "XLA ops"}.get(str(s.get("framework")), "TensorFlow ops")
        out.append(f'<p class="tfb-muted">No {ops} were recorded in the steady steps.</p></section>')
        return "".join(out)
    head = "".join(f'<th class="{"num" if i >= 3 else ""}">{t}</th>' for i, t in enumerate(
        ["Op", "Type", "Where", "Self ms/step", "%", "Calls/step"]))
    out.append(f'<div class="tfb-muted">Self time per steady step, over {_e(summary.get("steps"))} steps; % of the '
               f'step, device ops: of the device\'s busy time.</div>'
               f'<div class="tfb-scroll"><table class="tfb-table tfb-ops-table"><thead><tr>{head}</tr></thead>'
               f'<tbody>{"".join(_row(r) for r in rows)}</tbody></table></div>')
    for where, ms in (summary.get("self_ms_per_step") or {}).items():
        types = [g for g in summary.get("by_type") or [] if g["where"] == where][:3]
        named = ", ".join(f'{_e(g["type"])} {g["self_ms_per_step"]:.3f} ms ({g["pct"]:.1f} %)' for g in types)
        out.append(f'<p class="tfb-muted tfb-op-types" data-where="{_e(where)}">{_e(WHERE_LABEL.get(where, where))} '
                   f'ops by type: {named}</p>')
    out.append("</section>")
    return "".join(out)
