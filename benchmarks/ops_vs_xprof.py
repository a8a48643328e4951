"""The report's host op types against XProf's ``framework_op_stats`` on the same traces:
prints a Markdown table (XProf's five costliest host op types, IDLE and Dataset left out,
and tfbneck's five, with their times). XProf runs on a copy of each trace (it writes its
cache beside it).

Usage: python benchmarks/ops_vs_xprof.py FOLDER [FOLDER ...]   (session folders or logdirs)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

XPROF = ("import sys, json\n"
         "from xprof.convert import raw_to_tool_data as r\n"
         "data, _ = r.xspace_to_tool_data([sys.argv[1]], 'framework_op_stats', {})\n"
         "d = json.loads(data)\n"
         "d = d[0] if isinstance(d, list) else d\n"
         "cols = [c['id'] for c in d['cols']]\n"
         "rows = [dict(zip(cols, [c.get('v') for c in row['c']])) for row in d['rows']]\n"
         "print('RESULT', json.dumps([[r['host_or_device'], r['type'], r['total_self_time']] for r in rows]))\n")


def xprof_types(xplane):
    """XProf's host op types: type -> total self time (ms) over the whole trace."""
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "plugins", "profile", "s")
        os.makedirs(dest)
        copy = shutil.copy(xplane, dest)
        r = subprocess.run([sys.executable, "-c", XPROF, copy], capture_output=True, text=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3"))
    line = next(l for l in r.stdout.splitlines() if l.startswith("RESULT "))
    out = Counter()
    for where, kind, us in json.loads(line[7:]):
        if where == "Host" and kind not in ("IDLE", "Dataset"):
            out[kind] += us / 1e3
    return out


def our_types(folder):
    """tfbneck's host and tf.data op types: type -> self ms per steady step."""
    r = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", folder, "--format", "json"],
                       capture_output=True, text=True)
    (s,) = json.loads(r.stdout)["sessions"]
    out = Counter()
    for g in s["op_summary"]["by_type"]:
        if g["where"] in ("host", "input_pipeline"):
            out[g["type"]] += g["self_ms_per_step"]
    return out


def main():
    print("| trace | XProf framework_op_stats: top 5 host op types (ms, whole trace) "
          "| tfbneck: top 5 (ms per steady step) | XProf's five in XProf's order |")
    print("|---|---|---|---|")
    for folder in sys.argv[1:]:
        (xplane,) = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        theirs, all_ours = xprof_types(xplane).most_common(5), our_types(folder).most_common()
        ours, top = all_ours[:5], [k for k, _ in theirs]
        same = [k for k, _ in all_ours if k in top] == top  # XProf's five, in XProf's order
        print(f"| {os.path.basename(os.path.normpath(folder))} | "
              + ", ".join(f"{k} {v:.1f}" for k, v in theirs) + " | "
              + ", ".join(f"{k} {v:.2f}" for k, v in ours) + f" | {'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
