"""Subprocess worker of the fuzz tests: analyses one trace file per request, under a memory cap.

Run by tests/support/fuzz_harness.py as ``python fuzz_worker.py``; reads one JSON request per
line on stdin (``{"path": ...}``) and answers one JSON line per request on stdout. The
address-space limit (``TFBNECK_FUZZ_MEM_MB``, set with RLIMIT_AS before anything is
imported) bounds memory; the parent bounds time (it kills a worker that does not answer).
``TFBNECK_PURE_PYTHON=1`` in the environment selects the numpy decoder instead of the C one.

Each answer says what the analyzer did with the file, as the CLI would:
``outcome`` is ``ok`` (a report), ``error`` (``status: error`` and its one-line message) or
``exception`` (anything escaping ``analyze_session``: a bug), with the time taken and the
peak RSS while analysing it. ``read`` says what ``read_space`` alone did first: ``ok``,
``TraceReadError`` (with ``read_message``) or ``exception``.
"""
import hashlib
import json
import os
import resource
import sys
import time
import traceback

_MEM_MB = int(os.environ.get("TFBNECK_FUZZ_MEM_MB", "3072"))
if _MEM_MB > 0:
    resource.setrlimit(resource.RLIMIT_AS, (_MEM_MB * 2 ** 20, _MEM_MB * 2 ** 20))

from tfbneck_plugin.trace import wire  # noqa: E402  (after the limit, so imports count against it)
from tfbneck_plugin.analysis.session import analyze_session  # noqa: E402
from tfbneck_plugin.logdir import find_sessions  # noqa: E402
from tfbneck_plugin.trace.tracefile import read_space  # noqa: E402
from tfbneck_plugin.trace.xspace import TraceReadError  # noqa: E402


def _reset_peak() -> None:
    """Reset the kernel's peak-RSS counter (VmHWM) so each request's peak is its own."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def handle(path: str) -> dict:
    _reset_peak()
    t0 = time.perf_counter()
    out = {"decoder": "c" if wire.FAST else "numpy"}
    # The reader alone: a Space, or TraceReadError; anything else is a bug of the reader.
    try:
        read_space(path)
        out["read"] = "ok"
    except TraceReadError as err:
        out["read"] = "TraceReadError"
        out["read_message"] = str(err)
    except Exception as err:  # MemoryError included
        out.update(read="exception", type=type(err).__name__, message=str(err)[:500],
                   tb="".join(traceback.format_exception(err)[-6:])[-3000:])
    # The analyzer, as the CLI runs it.
    try:
        sessions = find_sessions(path).sessions
        if len(sessions) != 1:
            raise AssertionError(f"find_sessions({path!r}) found {len(sessions)} sessions")
        r = analyze_session(sessions[0])
        if not isinstance(r, dict) or r.get("status") not in ("ok", "error"):
            raise AssertionError(f"analyze_session returned {type(r).__name__} with status "
                                 f"{r.get('status') if isinstance(r, dict) else None!r}")
        out["outcome"] = r["status"]
        out["status"] = r.get("status")
        out["message"] = r.get("error")
        out["bottleneck"] = r.get("bottleneck")
        out["events"] = r.get("events")
        try:  # what the CLI's --format json writes must be JSON (no NaN, only plain types)
            text = json.dumps(r, sort_keys=True, allow_nan=False)
            out["json"] = True
            out["digest"] = hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()
        except (TypeError, ValueError) as err:
            out["json"] = False
            out["json_problem"] = f"{type(err).__name__}: {err}"
    except MemoryError:
        out.update(outcome="exception", type="MemoryError", message="MemoryError", tb="")
    except Exception as err:  # what the fuzz test exists to find
        out.update(outcome="exception", type=type(err).__name__, message=str(err)[:500],
                   tb="".join(traceback.format_exception(err)[-6:])[-3000:])
    out["seconds"] = round(time.perf_counter() - t0, 4)
    out["peak_rss_mb"] = _peak_mb()
    return out


def main() -> None:
    sys.stdout.write(json.dumps({"ready": True, "decoder": "c" if wire.FAST else "numpy"}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        sys.stdout.write(json.dumps(handle(req["path"])) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
