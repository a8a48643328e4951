"""``tfbneck trigger`` (``tfbneck_plugin/cli/trigger.py``): the slowdown trigger's record of a
run, read from its trend file, as a user who expected a window reads it (issue 24 point 3).

The trend files are written by the capture side's own classes (``StepTimer`` fed exact step
times by a test clock, ``JobTrend`` writing the file as the callback does), then read back
through the console script. The real fits' files are read the same way in
``tests/test_slowdown.py``.
"""
import json
import os
import subprocess

from conftest import tfbneck_cmd
from tfbneck_plugin.capture.steptime import StepTimer
from tfbneck_plugin.capture.trend import JobTrend
from tfbneck_plugin.records import MAX_TRIGGER_LOG
from tfbneck_plugin.cli.trigger import describe
from test_steptime import Clock, run_steps, trig


def trend_file(log_dir, durations, **trigger):
    """A run's trend file with the trigger's record of ``durations`` (seconds per step)."""
    clock = Clock()
    timer = StepTimer(trig(**trigger), clock=clock)
    fired = run_steps(timer, clock, durations)
    t = JobTrend(str(log_dir), [], timer.trigger.to_dict(), lambda k, m: None, trigger_state_of=timer.trigger_state)
    t.add_point({"step": len(durations), "first_step": 1, "steps": len(durations), "p50_ms": 10.0, "p90_ms": 12.0})
    t.write()
    return t.path, fired, timer.trigger_state()


def trigger(*paths):
    return subprocess.run(tfbneck_cmd() + ["trigger", *map(str, paths)], capture_output=True, text=True, timeout=120)


def test_a_short_slowdown_is_listed_with_why_it_was_not_profiled(tmp_path):
    # 200 steps of 10 ms, then 24 steps of 30 ms (0.72 s, under min_seconds=1.0), then fast again.
    path, fired, state = trend_file(tmp_path / "run", [0.5] * 5 + [0.010] * 200 + [0.030] * 24 + [0.010] * 200)
    assert fired == []
    (run,) = [e for e in state["log"] if e["event"] == "run"]
    assert run["first_step"] == 206 and run["outcome"] == "ended: fast_steps: too short"
    out = trigger(tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (f"{path} (host {os.uname().nodename}, pid {os.getpid()}): slowdown trigger 1.5x for 1 s "
                        "(or 300 steps lasting 2 s on an idle machine); windows opened: 0"), lines[0]
    armed = state["log"][0]
    assert lines[1] == (f"  step {armed['step']}: armed, baseline median 10 ms over {armed['baseline_steps']} steps, "
                        "slow beyond 15 ms")
    # (the stretch lasts until its level, the mean of a level's steps, is back under the threshold)
    assert lines[2] == (f"  steps 206-{run['last_step']}: slower, {run['steps']} steps, {run['seconds']:.2f} s, median "
                        f"10 ms -> {run['observed_p50_ms']:.3g} ms, level up to 30 ms against 15 ms: ended: fast_steps: "
                        "too short")
    assert len(lines) == 3


def test_stretches_too_few_to_list_and_a_full_log_are_said():
    data = {"host": "h", "pid": 1, "trigger": {"factor": 1.5, "min_seconds": 3.0, "consecutive": 5},
            "trigger_state": {"armed": True, "captures": 0, "short_runs": 3,
                              "log": [{"event": "rebaselined", "step": 7, "why": "after a capture"}] * MAX_TRIGGER_LOG}}
    lines = describe("f.json", data)
    assert lines[1] == "  step 7: baseline learnt again (after a capture)" and len(lines) == MAX_TRIGGER_LOG + 3
    assert lines[-2] == f"  (the file keeps the first and the latest of at most {MAX_TRIGGER_LOG} entries)"
    assert lines[-1] == "  and 3 slow stretches of fewer than 5 steps, not listed"
    data["trigger_state"] = {"armed": False, "captures": 0, "short_runs": 0, "log": []}
    assert describe("f.json", data)[1].startswith("  not armed: too few steps after the warm-up")


def test_a_captured_slowdown_then_the_baseline_learnt_again(tmp_path):
    path, fired, state = trend_file(tmp_path / "a", [0.5] * 5 + [0.010] * 200 + [0.100] * 40)
    assert fired == [226]
    out = trigger(path)  # the file itself
    assert out.returncode == 0
    text = out.stdout
    assert "windows opened: 1" in text.splitlines()[0]
    captured = "  steps 206-225: slower, 20 steps, 2.00 s, median 10 ms -> 100 ms, level up to 100 ms against 15 ms: captured"
    assert captured in text.splitlines(), text
    assert json.load(open(path))["trigger_state"] == state  # the command reads, computes nothing


def test_a_run_without_the_trigger_and_bad_input(tmp_path):
    t = JobTrend(str(tmp_path / "off"), [], None, lambda k, m: None)
    t.add_point({"step": 100, "first_step": 1, "steps": 100, "p50_ms": 10.0, "p90_ms": 12.0})
    t.write()
    out = trigger(tmp_path / "off")
    assert out.returncode == 0 and out.stdout.splitlines()[0].endswith("no slowdown trigger (on_slowdown was off)")
    # Each problem: one line naming the path, exit status 2 when nothing could be read.
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad" / "plugins" / "bottleneck"
    bad.mkdir(parents=True)
    (bad / "steptimes_x.json").write_text("{not json")
    before = (bad / "steptimes_x.json").read_bytes()
    for path, says in [(tmp_path / "missing", "no such file or folder"),
                       (tmp_path / "empty", "no step-time trend file"),
                       (tmp_path / "bad", "steptimes_x.json"),
                       ("s3://bucket/run", "reads local folders")]:
        out = trigger(path)
        assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, out.stderr
        (line,) = out.stderr.splitlines()
        assert line.startswith(f"tfbneck: {path}") and says in line, line
    assert (bad / "steptimes_x.json").read_bytes() == before
    # A good file beside a bad one: it is printed, the bad one named, exit status 0.
    out = trigger(tmp_path / "off", tmp_path / "bad")
    assert out.returncode == 0 and "on_slowdown was off" in out.stdout and "steptimes_x.json" in out.stderr


def good_file(tmp_path):
    path, _fired, _state = trend_file(tmp_path / "good", [0.5] * 5 + [0.010] * 200 + [0.100] * 40)
    return path


def test_hostile_trend_files_get_one_line_each_and_the_good_ones_are_still_printed(tmp_path):
    """From an attack on the command: a FIFO hung it; odd values in a file printed tracebacks
    (a 400-digit number, a log that is a number, short_runs a string, arrays nested 200000 deep);
    control characters from a file reached the terminal."""
    good = good_file(tmp_path)
    record = json.load(open(good))
    cases = {"fifo": None,
             "huge": dict(record, trigger_state=dict(record["trigger_state"], log=[
                 dict(record["trigger_state"]["log"][0], baseline_p50_ms=10 ** 400)])),
             "log_int": dict(record, trigger_state=dict(record["trigger_state"], log=7)),
             "state_list": dict(record, trigger_state=[1, 2]),
             "short_str": dict(record, trigger_state=dict(record["trigger_state"], short_runs="5")),
             "deep": "[" * 200000}
    says = {"fifo": "unreadable step-time file (not a regular file)", "huge": None, "log_int": "trigger_state.log is not a list",
            "state_list": "trigger_state is not an object", "short_str": "trigger_state.short_runs",
            "deep": "is not JSON"}
    for name, content in cases.items():
        folder = tmp_path / name / "plugins" / "bottleneck"
        folder.mkdir(parents=True)
        f = folder / "steptimes_x.json"
        if content is None:
            os.mkfifo(f)
        else:
            f.write_text(content if isinstance(content, str) else json.dumps(content))
        out = trigger(tmp_path / name, good)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (name, out.stderr)
        assert "windows opened: 1" in out.stdout, (name, out.stdout)  # the good file, printed all the same
        if says[name] is None:  # readable: the number too large for a float is shown as ?
            assert out.stderr == "" and "baseline median ? ms" in out.stdout, (name, out.stdout)
        else:
            (line,) = out.stderr.splitlines()
            assert line.startswith(f"tfbneck: {f}: ") and says[name] in line, (name, line)


def test_control_characters_from_a_file_are_escaped_and_paths_as_users_type_them(tmp_path):
    good = good_file(tmp_path)
    record = json.load(open(good))
    record["host"] = "a\x1b[2Jb"
    record["trigger_state"]["log"][1]["outcome"] = "captured\r\nfake line"
    folder = tmp_path / "ansi" / "plugins" / "bottleneck"
    folder.mkdir(parents=True)
    (folder / "steptimes_x.json").write_text(json.dumps(record))
    out = trigger(tmp_path / "ansi")
    assert out.returncode == 0 and "\x1b" not in out.stdout and "\r" not in out.stdout
    assert "host a\\x1b[2Jb" in out.stdout and "captured\\r\\nfake line" in out.stdout, out.stdout
    # The trend folder itself, with a trailing slash, or as ".": the same file; given twice, printed once.
    plugin_dir = os.path.dirname(good)
    for path, cwd in [(plugin_dir + "/", None), (".", plugin_dir)]:
        out = subprocess.run(tfbneck_cmd() + ["trigger", path, path], capture_output=True, text=True, timeout=120,
                             cwd=cwd)
        assert out.returncode == 0 and out.stdout.count("windows opened: 1") == 1, (path, out.stdout, out.stderr)
    # Standard output closed: one line, no traceback.
    out = subprocess.run(tfbneck_cmd() + ["trigger", good], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert out.returncode == 2 and out.stderr.strip() == "tfbneck: standard output is closed: nowhere to write the report"
