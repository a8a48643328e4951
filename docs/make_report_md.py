"""Writes docs/report.md, the report contract, from the typed schema.

    python docs/make_report_md.py            # rewrite docs/report.md
    python docs/make_report_md.py --check    # exit 1 when docs/report.md is not current

What comes from the code: every object of the report and its keys, their types and the
comment beside each key in ``tfbneck_plugin/schema.py`` (the ``TypedDict`` classes, in the
order they are declared), the error kinds (``tfbneck_plugin/errors.py``), the cause codes
(``tfbneck_plugin/causes.py``). What is written here: the longer meaning of the
session report's keys (:data:`MEANING`); ``tests/test_report_doc.py`` fails when a key of the
schema has neither a meaning here nor a comment there, when this file's output differs from
docs/report.md, or when a meaning names a key the schema lacks.
"""
from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(ROOT, "tfbneck_plugin", "schema.py")
OUT = os.path.join(ROOT, "docs", "report.md")

#: The session report's keys in words, where the schema's one-line comment is too short.
MEANING: Dict[str, str] = {
    "version": "the tfbneck version that made the report",
    "run": "the run folder, relative to the PATH given (with several PATHs, starting with the PATH's own folder "
           "name; a PATH that is a run folder is named after it); for a PATH that could not be searched, the PATH",
    "session": "the session folder's name (`<time>_steps<A>-<B>` for a BottleneckProfiler window); empty for a "
               "PATH that could not be searched",
    "hosts": "the hosts whose traces the session holds (one `<host>.xplane.pb` each)",
    "path": "the session folder (or the PATH that could not be searched)",
    "status": "`ok`, or `error` when the session could not be analysed",
    "error": "with `status: error`: one line naming the file and what is wrong",
    "error_kind": "with `status: error`: one of the error kinds below",
    "device_kind": "`GPU`, `TPU` or `CPU` (a CPU-only host: the CPU is the device)",
    "step_source": "how steps were found: the finder and what it matched, e.g. `step_markers ('train')`; `none`",
    "steps": "the steps found and their times (object below)",
    "breakdown_pct": "share of step time per category (sums to 100): `input`, `host_compute`, `device_compute`, "
                     "`host_to_device`, `device_to_host`, `collective`, `kernel_launch`, `idle`",
    "bottleneck": "the verdict: `cpu`, `device`, `io`, `network` or `unknown` (also `unknown` in an error report; "
                  "the CSV, table and Markdown rows say `error` there)",
    "cause": "the finer cause: a code of the cause table below",
    "cause_text": "the cause's meaning in one sentence",
    "confidence": "the chance the verdict is right, 0-1 (calibrated: Accuracy and performance, Confidence)",
    "evidence": "sentences with the numbers behind the verdict",
    "evidence_detail": "the same sentences with their `basis`: `trace`, `system_metrics` or `inferred`",
    "input_pipeline": "the tf.data stages and the one that blocks (object below)",
    "recommendations": "the changes to make, the largest predicted gain first (object below)",
    "devices": "per accelerator: busy, compute, copy and collective shares, kernels, idle gaps",
    "per_host": "several hosts or workers: each one's step time, breakdown and verdict; for a job also its own "
                "limit, how long it kept the others waiting and whether it is the straggler",
    "kind": "`job` for the entry that stands for a multi-worker job's sessions",
    "job": "in a job entry its grouping and root cause; in a worker's own session, the job its callback recorded",
    "sync": "a session whose steps hold collectives: per step its collective time and its own time by category",
    "system_metrics": "what BottleneckProfiler sampled during the window: CPU per core, the training process "
                      "tree, I/O wait, disk, network, GPUs (means and per-sample series); absent without a sidecar",
    "worst_step": "the step the Trace Viewer link opens (object below), or null",
    "top_ops": "the costliest ops of each place (`host`, `input_pipeline`, `device`), costliest first (object "
               "below; Which operations take the time)",
    "op_summary": "what `top_ops` covers, and the ops summed by op type and by layer scope (object below)",
    "trace_viewer": "the run (`<run>/<session>`, as TensorBoard names it) and host to open in the Trace Viewer",
    "warnings": "problems that did not stop the analysis (a host that could not be read, a bad sidecar), one "
                "line each",
}


def _comments(source: str) -> Dict[int, str]:
    """Line number -> the comment at the end of that line."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def typed_dicts(path: str = SCHEMA) -> List[Tuple[str, str, List[Tuple[str, str, str]]]]:
    """``[(class name, docstring, [(key, type, comment)])]`` of the schema's TypedDicts, in
    the order they are declared; a TypedDict that extends another of the schema's has that
    one's keys first."""
    source = open(path, encoding="utf-8").read()
    comments = _comments(source)
    out = []
    keys_of: Dict[str, List[Tuple[str, str, str]]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [getattr(b, "id", "") for b in node.bases]
        if "TypedDict" not in bases and not any(b in keys_of for b in bases):
            continue
        keys = [k for b in bases for k in keys_of.get(b, [])]
        keys += [(item.target.id, ast.unparse(item.annotation), comments.get(item.lineno, ""))
                 for item in node.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
        keys_of[node.name] = keys
        out.append((node.name, " ".join((ast.get_docstring(node) or "").split()), keys))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _reachable(classes) -> List[str]:
    """The schema classes a session report holds, at any depth (others type internal values)."""
    by = {name: keys for name, _doc, keys in classes}
    seen, todo = [], ["SessionDict"]
    while todo:
        name = todo.pop(0)
        if name in seen or name not in by:
            continue
        seen.append(name)
        todo += [w for _k, t, _c in by[name] for w in re.findall(r"[A-Za-z_]+", t) if w in by]
    return seen


def _object_sections(classes) -> List[str]:
    out = []
    keep = set(_reachable(classes))
    for name, doc, keys in classes:
        if name == "SessionDict" or name not in keep:
            continue
        out += [f"### `{name}`", "", doc, "", "| key | type | meaning |", "|---|---|---|"]
        out += [f"| `{k}` | `{_cell(t)}` | {_cell(c)} |" for k, t, c in keys]
        out.append("")
    return out


def _tables() -> List[str]:
    sys.path.insert(0, ROOT)
    from tfbneck_plugin.causes import CAUSES
    from tfbneck_plugin.errors import ERROR_KINDS
    out = ["## Error kinds", "", "`error_kind` of a session (or PATH) that could not be analysed "
           "(`tfbneck_plugin/errors.py`):", "", "| error_kind | meaning |", "|---|---|"]
    out += [f"| `{k}` | {_cell(v)} |" for k, v in ERROR_KINDS.items()]
    out += ["", "## Causes", "", "`cause` codes (`tfbneck_plugin/causes.py`); BottleneckProfiler writes each "
            "window's in its `bottleneck/verdict` text (TensorBoard's Text dashboard):", "",
            "| cause | bottleneck | meaning |", "|---|---|---|"]
    out += [f"| `{code}` | {c.bottleneck} | {_cell(c.text)} |" for code, c in CAUSES.items()]
    return out


def render() -> str:
    """The text of docs/report.md."""
    classes = typed_dicts()
    session = next(keys for name, _doc, keys in classes if name == "SessionDict")
    lines = ["# The report (`tfbneck analyze --format json`)", "",
             "<!-- generated by docs/make_report_md.py from tfbneck_plugin/schema.py; do not edit by hand -->", "",
             "`tfbneck analyze --format json`, `tfbneck_plugin.analyze(...).to_json()` and the tab's `/report` "
             "route give `{\"version\": ..., \"sessions\": [...]}`, one object per session. The keys below are a "
             "public contract: they keep their names and meaning, more keys may be added. Every key may be "
             "absent in an error report (`status: error`). The Beam runner writes `PREFIX-*.jsonl` with one "
             "`{\"key\": [path index, run, session], \"report\": <session object>}` per line.", "",
             "## A session", "", "| key | type | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | `{_cell(t)}` | {_cell(MEANING.get(k) or c)} |" for k, t, c in session]
    lines += ["", "## Objects inside a session", ""] + _object_sections(classes) + _tables()
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    text = render()
    if "--check" in argv:
        current = open(OUT, encoding="utf-8").read() if os.path.exists(OUT) else ""
        if current != text:
            print("docs/report.md is not current: run python docs/make_report_md.py", file=sys.stderr)
            return 1
        return 0
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
