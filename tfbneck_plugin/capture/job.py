"""The multi-worker job a training process is a worker of, as BottleneckProfiler records it
in the sidecar's ``job`` key; :func:`tfbneck_plugin.analysis.grouping.recorded_job` reads
it back to show the job's sessions as one report.

No TensorFlow is imported here: the strategy, when there is one, is passed in.

Where the job comes from:

* ``TF_CONFIG`` (the environment variable every ``MultiWorkerMirroredStrategy`` worker
  reads; format in tensorflow/python/distribute/cluster_resolver/
  tfconfig_cluster_resolver.py)::

      {"cluster": {"chief": ["host:port"], "worker": ["host:port", ...], "ps": [...]},
       "task": {"type": "worker", "index": 1}}

* else the strategy's ``cluster_resolver`` (``task_type``, ``task_id``, ``cluster_spec()``:
  tensorflow/python/distribute/collective_all_reduce_strategy.py), e.g. a Slurm resolver.

The job id is a hash of the cluster spec, the one thing every worker of the job sees the
same: the workers need not talk to agree on it. Two runs of the same cluster share it; the
analyzer tells them apart by their wall-clock windows.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, Mapping, Optional

#: Task types that run training steps under MultiWorkerMirroredStrategy (``chief`` and
#: ``worker``; ``evaluator`` evaluates on the side, ``ps`` holds variables).
TRAINING_TASKS = ("chief", "worker")
#: Hex digits of the job id (48 bits: a collision between two clusters is out of reach).
ID_DIGITS = 12


def job_info(strategy=None, environ: Optional[Mapping[str, str]] = None) -> Optional[Dict]:
    """The job of this process, or None outside a multi-worker job (fewer than two training
    tasks, no ``TF_CONFIG`` and no cluster resolver, or one that cannot be read).

    Args:
      strategy: the ``tf.distribute`` strategy in use, or None.
      environ: the environment (default ``os.environ``).
    Returns:
      ``{"id": str, "task": "worker:1", "task_type": str, "task_index": int,
      "cluster": {task type: number of tasks}, "workers": training tasks (chief +
      workers), "source": "TF_CONFIG" | "cluster_resolver"}``. Never raises.
    """
    environ = os.environ if environ is None else environ
    try:
        info = from_tf_config(environ.get("TF_CONFIG"))
        if info is None and strategy is not None:
            info = from_strategy(strategy)
    except Exception:  # noqa: BLE001 - a job that cannot be read is no job: never disturb training
        return None
    return info if info and info["workers"] >= 2 else None


def from_tf_config(text: Optional[str]) -> Optional[Dict]:
    """The job ``TF_CONFIG`` describes, or None when it is unset or not of that shape."""
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        return None
    return _build(cluster, task.get("type"), task.get("index", 0), "TF_CONFIG")


def from_strategy(strategy) -> Optional[Dict]:
    """The job a strategy's ``cluster_resolver`` describes, or None when it has none."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return None
    spec = resolver.cluster_spec()
    cluster = spec.as_dict() if hasattr(spec, "as_dict") else {}
    return _build(cluster, getattr(resolver, "task_type", None), getattr(resolver, "task_id", 0), "cluster_resolver")


def _build(cluster: Dict, task_type, task_index, source: str) -> Optional[Dict]:
    if not isinstance(task_type, str) or not task_type or isinstance(task_index, bool):
        return None
    try:
        task_index = int(task_index)
    except (TypeError, ValueError):
        return None
    # A task type maps to a list of addresses, or to {index: address} (a sparse cluster).
    addresses = {str(k): (sorted(map(str, v.values())) if isinstance(v, dict) else list(map(str, v)))
                 for k, v in cluster.items() if isinstance(v, (list, tuple, dict))}
    canonical = json.dumps(addresses, sort_keys=True)
    return {"id": hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:ID_DIGITS],
            "task": f"{task_type}:{task_index}", "task_type": task_type, "task_index": task_index,
            "cluster": {k: len(v) for k, v in addresses.items()},
            "workers": sum(len(v) for k, v in addresses.items() if k in TRAINING_TASKS), "source": source}


def session_suffix(info: Optional[Dict]) -> str:
    """What a worker adds to its session folder's name (``_worker1``), so that the sessions
    of a job's workers say whose they are, also when they share a ``log_dir``; '' outside a job."""
    if not info:
        return ""
    return f"_{info['task_type']}{info['task_index']}"


def with_job(sidecar: Optional[Dict], info: Optional[Dict], fmt: str, version: int) -> Optional[Dict]:
    """The sidecar dict with the job added (``job``); a sidecar without samples when system
    metrics were off and there is a job to record; ``sidecar`` unchanged outside a job.

    Args:
      sidecar: the system metrics about to be written, or None.
      info: :func:`job_info`'s result.
      fmt, version: the sidecar's ``format`` and ``version`` (``tfbneck_plugin.records``).
    """
    if not info:
        return sidecar
    out = sidecar if sidecar is not None else {"format": fmt, "version": version, "samples": []}
    out["job"] = info
    return out


def repeated_profiling_risk(info: Optional[Dict], windows_planned: int, triggered: bool) -> Optional[str]:
    """The one-time warning for a multi-worker job that will stop TensorFlow's profiler more
    than once (several scheduled windows, or ``on_slowdown``), else None.

    Each stop of TensorFlow 2.21's profiler in a job with collectives may kill the worker (a
    use-after-free in ``TraceMeRecorder::Consume``, measured in docs/profiler_abort.md).

    Args:
      info: :func:`job_info` of this process (None outside a multi-worker job).
      windows_planned: scheduled windows, counted up to 2.
      triggered: the slowdown trigger is armed.
    """
    if info is None or (windows_planned < 2 and not triggered):
        return None
    return (f"this is worker {info['task']} of a {info['workers']}-worker job: every stop of TensorFlow's profiler "
            f"in a job with collectives risks killing the worker (a TensorFlow 2.21 bug, see "
            f"docs/profiler_abort.md); profile one window per job rather than a periodic schedule or on_slowdown")
