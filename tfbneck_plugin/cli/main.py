"""``tfbneck``: the command line.

    tfbneck analyze PATH [PATH ...] [--format table|json|csv|markdown] [--output FILE] [--jobs N]
                    [--ops [--sort self|device|host] [--row-limit N]]
    tfbneck compare BASELINE CANDIDATE [--format table|json|markdown] [--change FIX] [--fail-if-slower PCT]
    tfbneck fleet PATH [PATH ...] [--group-by REGEX | --group-level N] [--since DATE] [--format ...] [--no-cache]
    tfbneck watch (--pid PID | -- COMMAND ...) [--duration S] [--format panel|json] [--output FILE]
    tfbneck trigger PATH [PATH ...]

Exit status: 0 every session analysed; 1 some sessions failed (the others are still
reported); 2 usage error or no session found.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import shutil
import sys
from typing import TYPE_CHECKING, List, Optional

from ..render.console import OutputError, write_stdout
from ..version import __version__

if TYPE_CHECKING:
    from ..schema import SessionDict

# The analysis (batch, report and what they import: numpy first) is imported by the commands
# that use it, when they run: run() sets up the process before numpy loads.


def _parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``tfbneck`` argument parser. With ``command`` (one of :data:`COMMANDS`) only that
    subcommand gets its arguments; the others are named with no arguments, so that a run of
    one command neither imports nor builds what the others need (``watch`` and ``compare``
    bring their own modules: ~30 ms of a cold ``analyze``). Without it, every subcommand is
    complete (help, the manual's generated CLI reference)."""
    p = argparse.ArgumentParser(prog="tfbneck", description="Tell why TensorFlow training is slow, from profiler traces.")
    p.add_argument("--version", action="version", version=f"tfbneck {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if command is None or command == name:
            add(sub)
        else:
            sub.add_parser(name)
    return p


def _command(argv: Optional[List[str]]) -> Optional[str]:
    """The subcommand ``argv`` names (its first argument that is not an option: the
    top-level options take no value), None when it names none of :data:`COMMANDS`."""
    args = sys.argv[1:] if argv is None else argv
    first = next((a for a in args if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def _add_analyze_parser(sub) -> None:
    from ..render import op_table
    from ..render.report import RENDERERS
    a = sub.add_parser("analyze", help="diagnose the profiling sessions under one or more logdirs",
                       description="Find profiling sessions (<run>/plugins/profile/<session>/*.xplane.pb, "
                                   "PyTorch's <run>/*.pt.trace.json[.gz]) under each PATH and diagnose each one.")
    a.add_argument("paths", nargs="+", metavar="PATH",
                   help="a logdir, a session folder or one trace file (.xplane.pb, .pt.trace.json[.gz], a PyTorch .json)")
    a.add_argument("--format", choices=sorted(RENDERERS), default="table", help="output format (default: table)")
    a.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of standard output")
    a.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="analyse N sessions in parallel (0 = one per CPU core)")
    a.add_argument("--runner", choices=["local", "beam"], default="local",
                   help="local processes (default) or an Apache Beam pipeline (pip install '.[beam]' in the tfbneck clone)")
    a.add_argument("--beam-output", metavar="PREFIX",
                   help="with --runner beam: write PREFIX-*.jsonl and PREFIX.csv (default: a temporary folder)")
    a.add_argument("--beam-options", metavar="OPTS", default="--runner=DirectRunner",
                   help="with --runner beam: Beam pipeline options, e.g. "
                        "'--runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp'")
    a.add_argument("--remote-timeout", type=_seconds, metavar="S",
                   help="for s3://, gs://... PATHs: seconds to reach the store and get a first listing "
                        "before giving up (default: $TFBNECK_REMOTE_TIMEOUT, else 10)")
    a.add_argument("--no-cache", action="store_true",
                   help="analyse every session again, neither reading nor filling the report cache "
                        "($TFBNECK_CACHE_DIR, default the user cache folder)")
    a.add_argument("--ops", action="store_true",
                   help="with --format table: also print each session's top ops (self time per steady step)")
    a.add_argument("--sort", choices=sorted(op_table.SORTS), default="self",
                   help="with --ops: all ops by self time (default), or only the device's or the host's")
    a.add_argument("--row-limit", type=_positive_int, default=10, metavar="N", help="with --ops: rows per session (default 10)")


def _add_watch_parser(sub) -> None:
    from ..watch.monitor import add_parser
    add_parser(sub)


def _add_trigger_parser(sub) -> None:
    from .trigger import add_parser
    add_parser(sub)


def _add_fleet_parser(sub) -> None:
    from ..fleet_view.render import RENDERERS as FLEET_RENDERERS
    f = sub.add_parser("fleet", help="across many runs: where the time goes, which runs waste most, which fix first",
                       description="Over every session under the PATHs: time per breakdown category (share, and "
                                   "accelerator-hours where a step-time trend file gives the run's length), sessions "
                                   "and runs per verdict, runs ranked by recoverable time with the fix that recovers "
                                   "it, groups, and a trend over the sessions' dates. Reports come from the report "
                                   "cache when the traces did not change.")
    f.add_argument("paths", nargs="+", metavar="PATH",
                   help="a logdir, a session folder or one trace file (.xplane.pb, .pt.trace.json[.gz], a PyTorch .json)")
    f.add_argument("--group-by", metavar="REGEX",
                   help="group runs by the first capture group of REGEX searched in the run name, e.g. 'exp-(\\w+)-'")
    f.add_argument("--group-level", type=int, default=1, metavar="N",
                   help="without --group-by: group runs by the first N folders of their name (default 1)")
    f.add_argument("--since", metavar="DATE", help="only sessions recorded on or after DATE (YYYY-MM-DD[THH:MM], local)")
    f.add_argument("--format", choices=sorted(FLEET_RENDERERS), default="table", help="output format (default: table)")
    f.add_argument("--output", "-o", metavar="FILE", help="write the fleet report to FILE instead of standard output")
    f.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="analyse N sessions in parallel (0 = one per CPU core)")
    f.add_argument("--no-cache", action="store_true", help="analyse every session again, without the report cache")
    f.add_argument("--remote-timeout", type=_seconds, metavar="S",
                   help="for s3://, gs://... PATHs: seconds to reach the store (default: $TFBNECK_REMOTE_TIMEOUT, else 10)")


def cmd_fleet(args) -> int:
    """``tfbneck fleet``: 0, or 1 when some sessions have no report (they are counted in
    the output); 2 for a usage error or no session."""
    from ..fleet_view import report as fleetmod
    from ..logdir import DiscoveryError
    from ..fleet_view.render import RENDERERS as FLEET_RENDERERS
    try:
        since = fleetmod.parse_since(args.since)
        fleetmod.grouper(args.group_by, args.group_level)
    except ValueError as err:
        print(f"tfbneck: {err}", file=sys.stderr)
        return 2
    _prepare_remote(args)
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    try:
        items, contexts, problems = fleetmod.collect(args.paths, jobs=jobs, use_cache=not args.no_cache,
                                                      since=since, progress=True)
    except DiscoveryError as err:
        print(f"tfbneck: {err}", file=sys.stderr)
        return 2
    if not items:
        print(f"tfbneck: no profiling session found under {', '.join(args.paths)}"
              + (f" since {args.since}" if since is not None else ""), file=sys.stderr)
        return 2
    try:
        result = fleetmod.build(items, contexts, args.group_by, args.group_level, problems)
    except ValueError as err:  # a --group-by that backtracks without end on a run name
        print(f"tfbneck: {err}", file=sys.stderr)
        return 2
    if _write_text(args.output, FLEET_RENDERERS[args.format](result), "fleet report"):
        return 2
    return 1 if result["errors"]["sessions"] else 0


def _write_text(output: Optional[str], text: str, what: str) -> bool:
    """Write ``text`` to ``output`` (or standard output); True when it could not be written."""
    if not output:
        write_stdout(text)
        return False
    try:
        with open(output, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
    except OSError as err:
        print(f"tfbneck: {output}: cannot write the {what} ({err.strerror})", file=sys.stderr)
        return True
    return False


def _add_compare_parser(sub) -> None:
    from ..comparison.compare import RENDERERS as COMPARE_RENDERERS
    c = sub.add_parser("compare", help="compare two sessions: faster, slower or no change, and why",
                       description="Compare the step times of BASELINE and CANDIDATE (one session each, or the runs "
                                   "of the same name): mean, p50 and p90 time per batch, the change tested on the runs' "
                                   "step-time trends, windows or steps (inconclusive when that evidence cannot "
                                   "separate the code from run-to-run noise or machine load), the breakdown per "
                                   "category, the verdicts, and the baseline's predicted "
                                   "gain of the change against the measured one.")
    c.add_argument("baseline", metavar="BASELINE", help="a logdir, run folder, session folder or trace file (.xplane.pb, "
                   ".pt.trace.json[.gz], a PyTorch .json)")
    c.add_argument("candidate", metavar="CANDIDATE", help="the same for the run after the change")
    c.add_argument("--format", choices=sorted(COMPARE_RENDERERS), default="table", help="output format (default: table)")
    c.add_argument("--output", "-o", metavar="FILE", help="write the comparison to FILE instead of standard output")
    c.add_argument("--change", metavar="FIX", help="the change made, as a recommendation's fix id (parallel_map, "
                   "prefetch, steps_per_execution, tf_function...); default: detected from the two reports")
    c.add_argument("--fail-if-slower", type=_percent, metavar="PCT",
                   help="exit 1 when the candidate is slower by more than PCT %% with significance (a CI gate)")


def cmd_compare(args) -> int:
    """``tfbneck compare``: 0, or 1 with ``--fail-if-slower`` when a candidate is slower
    beyond it; 2 when the sides cannot be compared."""
    from ..comparison import compare as comparemod
    from ..comparison import evidence as compare_evidence
    try:
        result = comparemod.compare(args.baseline, args.candidate, change=args.change)
    except comparemod.CompareError as err:
        print(f"tfbneck: {err}", file=sys.stderr)
        return 2
    text = comparemod.RENDERERS[args.format](result)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
        except OSError as err:
            print(f"tfbneck: {args.output}: cannot write the comparison ({err.strerror})", file=sys.stderr)
            return 2
    else:
        write_stdout(text)
    if args.fail_if_slower is not None:
        slow = comparemod.slower_than(result, args.fail_if_slower)
        for c in slow:
            unknown = compare_evidence.unknown_load_line(c)
            print(f"tfbneck: {c['candidate']['run']} is {c['change_pct']:.1f} % slower than {c['baseline']['run']} "
                  f"(p = {c['p_value']:.4g}), beyond --fail-if-slower {args.fail_if_slower:g}"
                  + (f"; {unknown}" if unknown else ""), file=sys.stderr)
        if not slow:
            for c in comparemod.inconclusive(result):
                print(f"tfbneck: inconclusive ({c['candidate']['run']} vs {c['baseline']['run']}, "
                      f"{c['change_pct']:+.1f} %): {c['evidence']['missing']}", file=sys.stderr)
        return 1 if slow else 0
    return 0


def _percent(text: str) -> float:
    """A finite, non-negative percentage (a NaN gate would never fail)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"not a percentage (a finite number >= 0): {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def _prepare_remote(args) -> None:
    """Remote PATHs: the time limit, and storage libraries kept from printing their retry
    tracebacks (the error that matters is printed as one line)."""
    from ..logdir import is_remote
    if not any(is_remote(p) for p in args.paths):
        return
    from .. import remote
    if args.remote_timeout is not None:
        remote.set_timeout(args.remote_timeout)
        os.environ[remote.TIMEOUT_ENV] = repr(args.remote_timeout)  # for --jobs and Beam workers
    remote.quiet_library_loggers(extra=("asyncio",))


def _analyze_beam(args) -> Optional[List[SessionDict]]:
    import tempfile
    from ..fleet_view import beam as beam_pipeline
    prefix = args.beam_output or os.path.join(tempfile.mkdtemp(prefix="tfbneck-beam-"), "sessions")
    try:
        beam_pipeline.run(args.paths, prefix, args.beam_options)
    except ImportError as err:
        print(f"tfbneck: {err}", file=sys.stderr)
        return None
    print(f"tfbneck: Beam results in {prefix}-*.jsonl and {prefix}.csv", file=sys.stderr)
    return beam_pipeline.read_results(prefix)


def cmd_analyze(args) -> int:
    from .. import batch
    from ..logdir import DiscoveryError
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    _prepare_remote(args)
    if args.runner == "beam":
        results = _analyze_beam(args)
        if results is None:
            return 2
        searched = [r for r in results if r.get("session") != "" or r.get("status") == "ok"]
        if not searched:  # as the local runner: no PATH could be searched, or nothing under them
            for r in results:
                print(f"tfbneck: {r.get('error')}", file=sys.stderr)
            if not results:
                print(f"tfbneck: {batch.no_session_message(args.paths)}", file=sys.stderr)
            return 2
        return _emit(args, results)
    try:
        sessions, problems, failed = batch.find(args.paths)
    except DiscoveryError as err:
        print(f"tfbneck: {err}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"tfbneck: warning: {p}", file=sys.stderr)
    if not sessions:
        print(f"tfbneck: {batch.no_session_message(args.paths)}", file=sys.stderr)
        return 2
    return _emit(args, batch.analyze_many(sessions, jobs, use_cache=not args.no_cache) + failed)


def _emit(args, results: List[SessionDict]) -> int:
    """Render, write, and choose the exit status (1 when any session failed)."""
    from ..render import op_table
    from ..analysis.grouping import group_jobs
    from ..render.report import RENDERERS, build_report, to_table
    results = group_jobs(results)  # the sessions of a multi-worker job become one entry
    on_terminal = args.format == "table" and not args.output and sys.stdout is not None and sys.stdout.isatty()
    text = (to_table(build_report(results), shutil.get_terminal_size().columns) if on_terminal
            else RENDERERS[args.format](build_report(results)))
    if getattr(args, "ops", False) and args.format == "table":
        text = text.rstrip("\n") + "\n\n" + "\n".join(op_table.to_text(r, args.sort, args.row_limit)
                                                   for r in results if r.get("status") == "ok")
    if args.output:
        try:
            # Names that are not UTF-8 (kept by Python as surrogates) are written as the
            # bytes they are on disk, as ls does, instead of failing the whole report.
            with open(args.output, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text if text.endswith("\n") else text + "\n")
        except OSError as err:
            print(f"tfbneck: {args.output}: cannot write report ({err.strerror})", file=sys.stderr)
            return 2
    else:
        write_stdout(text if text.endswith("\n") else text + "\n")
    failed = [r for r in results if r.get("status") != "ok"]
    # The table on a terminal already ends with each failure's ERROR line: said once there.
    if not on_terminal:
        for r in failed:
            print(f"tfbneck: error: {r.get('error')}", file=sys.stderr)
    return 1 if failed else 0


#: The subcommands, in the order help lists them: name -> the function that adds its parser.
COMMANDS = {"analyze": _add_analyze_parser, "compare": _add_compare_parser, "fleet": _add_fleet_parser,
            "watch": _add_watch_parser, "trigger": _add_trigger_parser}


def main(argv: Optional[List[str]] = None) -> int:
    return _run(_parser(_command(argv)).parse_args(argv))


def _run(args) -> int:
    try:
        return _dispatch(args)
    except OutputError as err:
        print(f"tfbneck: {err}", file=sys.stderr)
        return 2


def _dispatch(args) -> int:
    if args.command == "analyze":
        return cmd_analyze(args)
    if args.command == "compare":
        return cmd_compare(args)
    if args.command == "fleet":
        return cmd_fleet(args)
    if args.command == "watch":
        from ..watch.monitor import cmd_watch
        return cmd_watch(args)
    if args.command == "trigger":
        from .trigger import cmd_trigger
        return cmd_trigger(args)
    return 2


def run() -> int:
    """The ``tfbneck`` program (its console script and ``python -m tfbneck_plugin.cli``):
    :func:`main` in a process set up for one run that exits after it.

    * ``OPENBLAS_NUM_THREADS=1`` unless set: numpy's OpenBLAS starts a thread per core when
      it loads, which spins for ~0.1 s of CPU (as long as numpy's whole import, on another
      core); nothing here multiplies matrices.
    * glibc's allocator (``mallopt``; elsewhere nothing changes) keeps the memory the
      analysis frees instead of giving it back to the kernel: by default a freed block
      above 128 KiB (the bound rises to the largest block freed) goes back, and the heap
      is trimmed above 128 KiB free, so the arrays of MB that the analysis makes and drops
      by the hundred come back as fresh zeroed pages, one fault per 4 KiB (~60,000 faults
      on a 64 MB trace, ~6 % of its time). Blocks up to 32 MiB (glibc's largest bound) are
      then taken from the heap, which keeps up to 1 GiB free at its top and grows 64 MiB
      at a time. Measured on the 64 MB trace: -40 ms of CPU, +5 MB of peak RSS.
    * ``gc.freeze()`` once the command's modules are loaded: the cyclic collector's full
      passes, which the analysis's many small objects set off, then leave out the objects
      of every module imported (-20 ms on the 64 MB trace).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _keep_freed_memory()
    args = _parser(_command(None)).parse_args()
    if args.command in _MODULES:
        importlib.import_module(_MODULES[args.command], __package__)
    gc.freeze()
    return _run(args)


#: The module that brings in the analysis a command runs (see run()).
_MODULES = {"analyze": "..batch", "compare": "..comparison.compare", "fleet": "..fleet_view.report"}


#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def _keep_freed_memory() -> None:
    """See :func:`run`. Nothing where the C library has no ``mallopt`` (musl, macOS)."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    for param, value in ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20)):
        mallopt(param, value)


if __name__ == "__main__":
    sys.exit(run())
