"""The input pipeline's cost, measured as an ablation does: the same model trained for a few
steps on what the user's input gives, then on cached copies of batches it already made; the
difference is what the input costs the run, measured rather than modelled from a trace.

    from tfbneck_plugin.capture import measure_input_cost
    result = measure_input_cost(model, train_ds, log_dir="logs/run1")   # before or after fit

Both kinds of step go through ``model.fit`` (the same train function, the same data
adapters: ``PyDataset`` workers, ``tf.data`` prefetch threads and their competition for the
cores included), alternating :data:`REPEATS` times seconds apart so that both see the same
machine. The model's state is put back afterwards: every variable of the model and of its
optimizer (optimizer slots the measurement created are zeroed, as a new optimizer has them),
its metrics reset, ``model.history`` and ``model.stop_training`` as they were. What the input
object itself holds is not: a generator or iterator is consumed (pass a fresh one); a
``tf.data.Dataset``, a ``PyDataset`` or a ``keras.utils.Sequence`` is only read.

The gain is the ratio of the mean time per batch on the real input to that on the cached
batches; :data:`INPUT_LIMITED` and :data:`MODEL_LIMITED` are the definitions of the
tutorial corpus (benchmarks/tutorial_corpus.py, whose truths are made the same way). With
``log_dir``, the result is written to ``<log_dir>/plugins/bottleneck/input_cost_<time>.json``
(:data:`tfbneck_plugin.runs.INPUT_COST_FORMAT`), which ``tfbneck analyze`` and the tab
show beside the run's verdict.

Works on each Keras 3 backend (the cached batches are a ``tf.data`` pipeline on TensorFlow,
a ``PyDataset`` of in-memory batches on JAX and PyTorch); imports TensorFlow only on the
TensorFlow backend.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any, Dict, List, Optional

from .. import records
from ..errors import TfbneckError
from ..runs import INPUT_COST_FORMAT, INPUT_COST_PREFIX

#: Alternations of real-input and cached-batch fits (the tutorial corpus's REPS).
REPEATS = 2
#: Steps timed in each fit, after :data:`WARMUP_STEPS` that are not (tracing, worker start,
#: prefetch buffers filling).
STEPS = 30
WARMUP_STEPS = 5
#: Distinct batches kept for the cached fits (cycled): enough that a per-batch cost of shape
#: or content varies as it does in the run, few enough to hold in memory.
CACHED_BATCHES = 16
#: Gain (real time per batch / cached time per batch) from which the input limits the run,
#: and under which the model's math does: the tutorial corpus's definitions
#: (benchmarks/tutorial_corpus.py, INPUT_LIMITED and DEVICE_LIMITED).
INPUT_LIMITED = 1.25
MODEL_LIMITED = 1.1
#: Below this gain the cached batches ran slower than the real input by more than the model's
#: own threshold: removing work cannot slow a step, so the machine changed under the fits.
NOISE_GAIN = 1 / MODEL_LIMITED


class InputCostError(TfbneckError):
    """The measurement cannot be made (the input kind, too few batches, an un-compiled
    model); the message is one line saying what is wrong."""


def _limit_word(gain: float) -> str:
    if gain >= INPUT_LIMITED:
        return "input"
    return "model" if gain < MODEL_LIMITED else "mixed"


def _settled(gains: List[float]) -> Optional[str]:
    """None when the repeats' gains (real / cached of each alternation) say the same thing;
    else why the measurement settles nothing: they fall on different sides of the thresholds,
    or one has cached batches slower than the real input (:data:`NOISE_GAIN`)."""
    if min(gains) < NOISE_GAIN:
        return (f"in one repeat the cached batches ran slower than the real input ({min(gains):.2f}x): the machine's "
                "load changed under the fits")
    if len({_limit_word(g) for g in gains}) > 1:
        return (f"the repeats disagree (gains {min(gains):.2f}x to {max(gains):.2f}x, on both sides of "
                f"{MODEL_LIMITED}x or {INPUT_LIMITED}x)")
    return None


def _keras(model):
    """The user's Keras 3 (on the backend their fit runs on), for a ``model`` that is a Keras
    model (its class comes from a ``keras`` package: Keras 3's, or tf.keras' under
    ``keras.src``/``tf_keras``).

    Raises:
      InputCostError: ``model`` is not a Keras model (a PyTorch ``nn.Module``...), or Keras is
        not installed."""
    module = type(model).__module__ or ""
    mro = [c.__module__ or "" for c in type(model).__mro__]
    if not any(m.split(".")[0] in ("keras", "tf_keras") for m in [module] + mro):
        raise InputCostError(
            f"{type(model).__name__} ({module}): not a Keras model; measure_input_cost trains a compiled Keras model "
            "with fit. For a PyTorch loop, time it on cached batches as the measure_input fix's code does "
            "(docs/pytorch.md)")
    try:
        import keras
    except ImportError as e:
        raise InputCostError(f"Keras cannot be imported ({e}): measure_input_cost needs Keras 3") from None
    return keras


class _StepClock:
    """Times each call of the train function (``on_train_batch_end`` to the next), in ms."""

    def __init__(self, keras) -> None:
        clock = self

        class _Callback(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                clock.ends = [time.perf_counter()]

            def on_train_batch_end(self, batch, logs=None):
                clock.ends.append(time.perf_counter())

        self.ends: List[float] = []
        self.callback = _Callback()

    def steady_ms(self, warmup: int) -> List[float]:
        gaps = [1000.0 * (b - a) for a, b in zip(self.ends, self.ends[1:])]
        return gaps[warmup:]


class _ModelState:
    """The model's and its optimizer's variables, metrics and fit attributes, to put back."""

    def __init__(self, model) -> None:
        self.model = model
        self.values = [(v, v.numpy()) for v in model.variables]
        opt = getattr(model, "optimizer", None)
        self.opt_values = [(v, v.numpy()) for v in (getattr(opt, "variables", None) or [])]
        self.opt_ids = {id(v) for v, _ in self.opt_values}
        self.history = getattr(model, "history", None)
        self.stop_training = getattr(model, "stop_training", False)

    def restore(self) -> None:
        import numpy as np
        for v, value in self.values + self.opt_values:
            v.assign(value)
        opt = getattr(self.model, "optimizer", None)
        for v in getattr(opt, "variables", None) or []:
            if id(v) not in self.opt_ids:  # built by the measurement's first step: a new optimizer's zeros
                v.assign(np.zeros(tuple(v.shape), dtype=v.dtype))
        self.model.reset_metrics()
        self.model.history = self.history
        self.model.stop_training = self.stop_training


def _kind(data: Any) -> str:
    in_memory = isinstance(data, (tuple, list, dict)) or (hasattr(data, "shape") and hasattr(data, "dtype"))
    if hasattr(data, "element_spec") and hasattr(data, "take"):
        return "tf.data"
    if hasattr(data, "__getitem__") and hasattr(data, "__len__") and not in_memory:
        return "PyDataset"
    if hasattr(data, "__next__"):
        return "iterator"
    if hasattr(data, "__iter__") and not in_memory:
        return "iterable"
    raise InputCostError(
        f"{type(data).__name__}: arrays (or a list or dict of them) are already in memory, with no input pipeline "
        "to measure; pass the tf.data.Dataset, PyDataset or generator that fit reads")


def _take(data: Any, kind: str, n: int) -> List[Any]:
    """``n`` batches the input makes (fewer when it ends first)."""
    if kind == "tf.data":
        return list(data.take(n))
    if kind == "PyDataset":
        return [data[i] for i in range(min(n, len(data)))]
    it = data if kind == "iterator" else iter(data)
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _cached_input(keras, batches: List[Any], steps: int):
    """What fit reads for the cached steps: a repeated, prefetched tf.data pipeline of the
    batches on TensorFlow; on the other backends a PyDataset cycling them in memory."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        shape = tf.nest.map_structure(lambda t: tuple(getattr(t, "shape", ())), batches[0])
        same = [b for b in batches if tf.nest.map_structure(lambda t: tuple(getattr(t, "shape", ())), b) == shape]
        stacked = tf.nest.map_structure(lambda *ts: tf.stack([tf.convert_to_tensor(t) for t in ts]), *same)
        return tf.data.Dataset.from_tensor_slices(stacked).repeat().prefetch(tf.data.AUTOTUNE)

    class _Cached(keras.utils.PyDataset):
        def __len__(self):
            return steps

        def __getitem__(self, i):
            return batches[i % len(batches)]

    return _Cached()


def _real_input(data: Any, kind: str):
    """What fit reads for the real steps: the user's own input; a tf.data pipeline repeated
    (a new pipeline object: the user's is not changed) so that it does not run out."""
    return data.repeat() if kind == "tf.data" else data


def _mean(xs: List[float]) -> float:
    return sum(xs) / len(xs)


#: Seconds of each probe of the other processes' load (:func:`_others_cores`): five 100 Hz
#: CPU-accounting ticks per core at least, short beside a fit of tens of steps.
PROBE_S = 0.2


def _others_cores() -> Optional[float]:
    """Cores that other processes kept busy over :data:`PROBE_S` while this process tree sat
    still between fits (machine-wide busy CPU time less the tree's, from psutil), or None
    without psutil or /proc: the load a measurement ran beside, so that the report can set it
    against the profiled window's (a trace's modelled worth shrinks with the others' load)."""
    try:
        import psutil
        me = psutil.Process()

        def busy() -> float:
            # Time on this machine's CPUs running code. Linux counts a guest's time in user
            # (and guest_nice in nice) already, and steal is time the hypervisor gave to other
            # machines (proc(5), /proc/stat): neither is a process here using a core.
            t = psutil.cpu_times()
            return sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq"))

        def tree() -> Dict[int, float]:
            # Each process's own CPU seconds; pid 0 holds this process's reaped children's (a
            # fit's worker processes that exit during the probe move there, not out of the tree).
            out: Dict[int, float] = {}
            for p in [me, *me.children(recursive=True)]:
                try:
                    c = p.cpu_times()
                except psutil.Error:
                    continue
                out[p.pid] = c.user + c.system
                if p is me:
                    out[0] = getattr(c, "children_user", 0.0) + getattr(c, "children_system", 0.0)
            return out
        b0, t0, w0 = busy(), tree(), time.monotonic()
        time.sleep(PROBE_S)
        b1, t1, w1 = busy(), tree(), time.monotonic()
    except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: the load is unknown
        return None
    cores = float(psutil.cpu_count() or 1)
    return round(min(max((b1 - b0) - _tree_spent(t0, t1), 0.0) / max(w1 - w0, 1e-3), cores), 2)


def _tree_spent(before: Dict[int, float], after: Dict[int, float]) -> float:
    """CPU seconds the process tree spent between two readings (pid -> CPU seconds, pid 0 the
    reaped children's total, as :func:`_others_cores` reads them): what each process alive at
    the second added, less what those gone by then had at the first (a reaped child's whole
    lifetime moved into pid 0's figure, so only its time since the first reading remains)."""
    return (sum(v - before.get(pid, 0.0) for pid, v in after.items())
            - sum(v for pid, v in before.items() if pid not in after))


def measure_input_cost(model, data: Any, steps: int = STEPS, repeats: int = REPEATS,
                       log_dir: Optional[str] = None) -> Dict[str, Any]:
    """Measure what the input pipeline costs the model's training steps.

    Args:
      model: a compiled Keras 3 model (the one ``fit`` trains).
      data: what ``fit`` reads: a ``tf.data.Dataset``, a ``keras.utils.PyDataset`` (workers
        and processes as configured), a ``keras.utils.Sequence``, or a generator or iterator
        of batches (consumed: give a fresh one).
      steps: steps timed per fit (after :data:`WARMUP_STEPS`), at least 5.
      repeats: alternations of real and cached fits, at least 1.
      log_dir: the run's log folder; when given, the result is also written there
        (``plugins/bottleneck/input_cost_<time>.json``).

    Returns:
      ``{"real_ms_per_batch", "cached_ms_per_batch", "input_ms_per_batch", "gain", "limit",
      "input_share", "steps", "repeats", "steps_per_execution", "backend", "input_kind",
      "real_ms_runs", "cached_ms_runs", "unsettled", "others_cores", "path"}``: mean ms per batch over the timed
      steps of all repeats on each input; ``gain`` = real / cached; ``limit`` ``"input"`` (gain >=
      :data:`INPUT_LIMITED`), ``"model"`` (< :data:`MODEL_LIMITED`), ``"mixed"``, or
      ``"unsettled"`` when the repeats disagree (``unsettled`` says how; else None: measure again
      on a quieter machine, or with more steps or repeats);
      ``input_share`` = (real - cached) / real; ``*_runs``: each fit's mean; ``others_cores``:
      the cores other processes used, probed before each alternation (:func:`_others_cores`;
      None where unknown); ``path``: the file written, None without ``log_dir``.

    Raises:
      InputCostError: a model that is not a Keras model, an input kind with nothing to measure
        (arrays), fewer than 2 batches, a model that is not compiled, or ``steps``/``repeats``
        out of range.
    """
    keras = _keras(model)
    if steps < 5 or repeats < 1:
        raise InputCostError(f"steps={steps}, repeats={repeats}: at least 5 steps and 1 repeat are needed")
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise InputCostError(f"{type(model).__name__}: the model is not compiled; call model.compile first")
    kind = _kind(data)
    state = _ModelState(model)
    spe = int(getattr(model, "steps_per_execution", 1) or 1)
    real_runs: List[float] = []
    cached_runs: List[float] = []
    probes: List[Optional[float]] = []
    try:
        batches = _take(data, kind, CACHED_BATCHES)
        if len(batches) < 2:
            raise InputCostError(f"{type(data).__name__}: gave {len(batches)} batch(es); at least 2 are needed")
        per_fit = WARMUP_STEPS + steps
        real = _real_input(data, kind)
        cached = _cached_input(keras, batches, per_fit)
        for _ in range(repeats):
            probes.append(_others_cores())
            for source, runs in ((real, real_runs), (cached, cached_runs)):
                clock = _StepClock(keras)
                # shuffle=False: a dataset or generator is not shuffled by fit anyway (Keras warns that
                # shuffle=True is ignored for them), and a PyDataset then reads its batches in order.
                model.fit(source, epochs=1, steps_per_epoch=per_fit, verbose=0, callbacks=[clock.callback],
                          shuffle=False)
                timed = clock.steady_ms(WARMUP_STEPS)
                if not timed:
                    raise InputCostError(f"{type(data).__name__}: the input ran out before {per_fit} steps")
                runs.append(_mean(timed) / spe)
    finally:
        state.restore()
    real_ms, cached_ms = _mean(real_runs), _mean(cached_runs)
    gain = real_ms / cached_ms if cached_ms > 0 else float("inf")
    unsettled = _settled([r / c if c > 0 else float("inf") for r, c in zip(real_runs, cached_runs)])
    result: Dict[str, Any] = {
        "format": INPUT_COST_FORMAT, "version": 1, "time_unix": time.time(),
        "host": socket.gethostname(), "pid": os.getpid(),
        "real_ms_per_batch": round(real_ms, 4), "cached_ms_per_batch": round(cached_ms, 4),
        "input_ms_per_batch": round(max(real_ms - cached_ms, 0.0), 4), "gain": round(gain, 3),
        "limit": "unsettled" if unsettled else _limit_word(gain), "unsettled": unsettled,
        "input_share": round(max(real_ms - cached_ms, 0.0) / real_ms, 4),
        "steps": steps, "repeats": repeats, "steps_per_execution": spe, "backend": keras.backend.backend(),
        "input_kind": kind, "real_ms_runs": [round(x, 4) for x in real_runs],
        "cached_ms_runs": [round(x, 4) for x in cached_runs], "path": None,
        "others_cores": round(_mean(known), 2) if (known := [p for p in probes if p is not None]) else None}
    if log_dir is not None:
        result["path"] = write_input_cost(log_dir, result)
    return result


def write_input_cost(log_dir: str, result: Dict[str, Any]) -> str:
    """Write a measurement (:func:`measure_input_cost`'s result) into the run's folder
    ``log_dir``, creating ``plugins/bottleneck``, named by its time, host and process
    (:data:`tfbneck_plugin.runs.INPUT_COST_PREFIX`); returns the path. Raises OSError when the
    folder cannot be written."""
    folder = os.path.join(log_dir, records.STEP_TIMES_DIR)
    os.makedirs(folder, exist_ok=True)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(result["time_unix"]))
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in str(result.get("host") or "")) or "host"
    name = f"{INPUT_COST_PREFIX}{stamp}_{safe}_{int(result.get('pid') or 0)}{records.STEP_TIMES_SUFFIX}"
    return records.write_sidecar(folder, dict(result, path=None), name)
