"""Real training jobs for tests/test_capture_faults.py: faults while BottleneckProfiler captures.

    python fault_jobs.py SCENARIO OUT_DIR

Scenarios:

* ``killed_in_step``: a window of steps 3-6 is open; during step 5 the job writes
  ``OUT_DIR/ready.json`` and hangs, so that the test can SIGKILL it inside the window.
* ``killed_saving``: the window's trace has been exported into the staging folder and its
  system-metrics sidecar is half written (the JSON encoder stalls after 64 KiB) when the job
  writes ``ready.json`` and hangs: the test SIGKILLs it there.
* ``faults``: one process, several ``fit`` runs with the same data and seed, each under one
  fault: the trace, the skip record or the sidecar write failing with EFBIG (``RLIMIT_FSIZE``)
  or ENOSPC (a full tmpfs, when the test mounted one at ``$FAULT_TMPFS``; also full from the
  start), the sampler raising midway or not starting, several windows written while the test
  polls the files, and a later run in the log dir of ``killed_in_step`` (``$FAULT_KILLED_LOG``).
  Writes ``OUT_DIR/result.json`` (window records, losses with and without the callback, the
  callback's warnings).

The helpers (model, data, seeds, window records) come from ``jobs.py``, which reads the
same ``SCENARIO OUT_DIR`` arguments.
"""
import errno
import json
import logging
import os
import resource
import signal
import sys
import time

from jobs import OUT, SCENARIO, arrays, keras, losses, model, record, seed, slow_dataset  # noqa: E402

import tfbneck_plugin.capture.window as winmod  # noqa: E402 - writes the sidecar
from tfbneck_plugin import BottleneckProfiler, profile_steps  # noqa: E402
from tfbneck_plugin.system import sampler as sysmetrics  # noqa: E402
from tfbneck_plugin.records import SIDECAR_NAME, STAGING_DIR  # noqa: E402

result = {"out": OUT}
X, Y = arrays(6 * 8)  # 6 batches of 8: two epochs are steps 1-12
EPOCHS = 2
#: Soft file-size limit while the trace is written: far below any trace, above the skip record.
TRACE_FSIZE = 8192
#: Soft file-size limit below even the skip record: nothing about the window can be written.
RECORD_FSIZE = 100
#: Soft file-size limit while the sidecar is written: below any sidecar (its fixed keys alone are longer).
SIDECAR_FSIZE = 128


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------

def ready(info):
    """Tell the test (polling for OUT/ready.json) that the job reached the point to kill it."""
    tmp = os.path.join(OUT, "ready.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, os.path.join(OUT, "ready.json"))


def hang():
    time.sleep(600)  # the test kills the process long before
    sys.exit("not killed")


class AtStep(keras.callbacks.Callback):
    """Runs actions at the beginning of global steps (1-based, counted across epochs)."""

    def __init__(self, actions):
        super().__init__()
        self.actions, self.step = actions, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        if self.step in self.actions:
            self.actions[self.step]()


def fit(callbacks, data=None):
    seed()
    m = model()
    if data is None:
        h = m.fit(X, Y, batch_size=8, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=callbacks)
    else:
        h = m.fit(data, epochs=1, verbose=0, callbacks=callbacks)
    return losses(h)


def set_fsize(limit):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def unlimit_fsize():
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))


def fill_disk(folder):
    """Write a file in ``folder`` until its file system is full (ENOSPC); returns its path."""
    path = os.path.join(folder, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return path


class Warnings(logging.Handler):
    """Collects the callback's WARNING messages (logger "tfbneck")."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, rec):
        self.messages.append(rec.getMessage())


WARNINGS = Warnings()
logging.getLogger("tfbneck").addHandler(WARNINGS)


def run_case(name, make_cb, callbacks=(), data=None, sidecar_hook=None):
    """One fit with a fresh callback; ``sidecar_hook(real_write, folder, data, name)``
    replaces the callback's sidecar writes (other records are written as usual)."""
    first = len(WARNINGS.messages)
    cb = make_cb()
    real = winmod.write_sidecar
    if sidecar_hook is not None:
        def hooked(folder, payload, name=SIDECAR_NAME):
            if name == SIDECAR_NAME:
                return sidecar_hook(real, folder, payload, name)
            return real(folder, payload, name=name)
        winmod.write_sidecar = hooked
    try:
        got = fit([cb] + list(callbacks), data)
        cb.close(wait=True, timeout=120)
    finally:
        winmod.write_sidecar = real
    result[name] = {"losses": got, "windows": [record(w) for w in cb.windows],
                    "warnings": WARNINGS.messages[first:], "log_dir": cb.log_dir}


# ------------------------------------------------------------------------------------------
# Scenarios
# ------------------------------------------------------------------------------------------

def killed_in_step():
    log = os.path.join(OUT, "logs")

    def at_step_5():  # the window opened at step 3; steps 3 and 4 are recorded
        staging = os.path.join(log, STAGING_DIR)
        ready({"pid": os.getpid(), "staging": sorted(os.listdir(staging))})
        hang()

    cb = BottleneckProfiler(log, profile_steps=(3, 6), analyze=False, sample_interval_s=0.05)
    fit([cb, AtStep({5: at_step_5})])


def killed_saving():
    log = os.path.join(OUT, "logs")

    class Stalling(dict):
        """The sidecar's JSON encoder gets 64 KiB of padding (flushed to the file), then
        the job stops there: the temporary file is torn when the process is killed."""

        def items(self):
            yield "padding", "x" * 65536
            ready({"pid": os.getpid()})
            hang()
            yield from super().items()

    def stall(real, folder, payload, name):
        return real(folder, Stalling(payload), name=name)

    run_case("killed_saving", lambda: BottleneckProfiler(log, profile_steps=(3, 5), analyze=False),
             sidecar_hook=stall)


def faults():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails with EFBIG
    result["losses_without"] = fit([])
    result["losses_without_slow"] = fit([], slow_dataset(8))

    # A later run of the callback in the log dir where a process was killed inside a window.
    killed_log = os.environ.get("FAULT_KILLED_LOG")
    if killed_log:
        run_case("later_run", lambda: BottleneckProfiler(killed_log, profile_steps=(3, 5), analyze=False))

    def cb_two_windows(name, base=OUT):
        return lambda: BottleneckProfiler(os.path.join(base, name), profile_steps=[(3, 5), (8, 9)], analyze=False)

    # The trace write hits the file-size limit (set for steps 1-6, lifted at step 7).
    run_case("trace_efbig", cb_two_windows("trace_efbig"),
             [AtStep({1: lambda: set_fsize(TRACE_FSIZE), 7: unlimit_fsize})])

    # Not even the skip record fits under the limit.
    run_case("record_efbig", cb_two_windows("record_efbig"),
             [AtStep({1: lambda: set_fsize(RECORD_FSIZE), 7: unlimit_fsize})])

    # The sidecar write hits the file-size limit (the trace was written before).
    def sidecar_efbig(real, folder, payload, name):
        set_fsize(SIDECAR_FSIZE)
        try:
            return real(folder, payload, name=name)
        finally:
            unlimit_fsize()

    run_case("sidecar_efbig", lambda: BottleneckProfiler(os.path.join(OUT, "sidecar_efbig"), profile_steps=(3, 5),
                                                         analyze=False), sidecar_hook=sidecar_efbig)

    tmpfs = os.environ.get("FAULT_TMPFS")
    if tmpfs:
        # The disk fills up during step 5 (inside the window 3-5), before the trace is
        # written; space comes back at step 7.
        filler = os.path.join(tmpfs, "filler")
        run_case("trace_enospc", cb_two_windows("trace_enospc", tmpfs),
                 [AtStep({5: lambda: fill_disk(tmpfs), 7: lambda: os.unlink(filler)})])

        # The disk is full while the sidecar is written.
        def sidecar_enospc(real, folder, payload, name):
            path = fill_disk(tmpfs)
            try:
                return real(folder, payload, name=name)
            finally:
                os.unlink(path)

        run_case("sidecar_enospc", lambda: BottleneckProfiler(os.path.join(tmpfs, "sidecar_enospc"),
                                                              profile_steps=(3, 5), analyze=False),
                 sidecar_hook=sidecar_enospc)

        # The disk is full before training starts, and stays full during the whole fit.
        fill_disk(tmpfs)
        try:
            run_case("full_from_start", cb_two_windows("full_from_start", tmpfs))
        finally:
            os.unlink(filler)

    # The sampler thread raises after two samples, inside the window.
    original_sample, original_start = sysmetrics.SystemSampler._take, sysmetrics.SystemSampler.start
    calls = []

    def failing_sample(self, psutil, now):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected sampler failure after 2 samples")
        return original_sample(self, psutil, now)

    def failing_start(self):
        raise RuntimeError("can't start new thread (injected)")

    # The failures are injected into the sampler class, which the whole-run system view uses
    # too: it is off here, so that the window's own sampler is the one that fails.
    sysmetrics.SystemSampler._take = failing_sample
    try:
        run_case("sampler_midway", lambda: BottleneckProfiler(os.path.join(OUT, "sampler_midway"),
                                                              profile_steps=(3, 5), sample_interval_s=0.02,
                                                              analyze=False, system_interval_s=None),
                 data=slow_dataset(8))
    finally:
        sysmetrics.SystemSampler._take = original_sample
    sysmetrics.SystemSampler.start = failing_start
    try:
        run_case("sampler_no_start", lambda: BottleneckProfiler(os.path.join(OUT, "sampler_no_start"),
                                                                profile_steps=(3, 5), analyze=False,
                                                                system_interval_s=None))
    finally:
        sysmetrics.SystemSampler.start = original_start

    # Six windows (sidecars sampled every 10 ms) while the test reads every JSON file it sees.
    run_case("atomic", lambda: BottleneckProfiler(os.path.join(OUT, "atomic"),
                                                  profile_steps=profile_steps(every=3, length=2, start=3),
                                                  sample_interval_s=0.01, analyze=False),
             data=slow_dataset(19, delay_s=0.03))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    globals()[SCENARIO]()
    result["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
