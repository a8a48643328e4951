"""What ``BottleneckProfiler`` writes into a trace and its sidecar on each Keras backend, shared
by the writer (:mod:`tfbneck_plugin.capture.engines`) and the readers
(:mod:`tfbneck_plugin.analysis.jax_host`, :mod:`tfbneck_plugin.analysis.session`). No imports.

Sidecar keys (``tfbneck_system_metrics.json``; older sidecars lack them; on the JAX and
PyTorch backends the sidecar is written even without system metrics, with ``"samples": []``)::

    "backend": "tensorflow" | "jax" | "torch",       # keras.backend.backend() of the fit
    "keras_input": "tf.data" | "PyDataset" | "generator" | "DataLoader" | "arrays" | "grain" | "other"
                                                     # what fed the fit (its Keras data adapter)
"""

#: The Keras backends the callback profiles, as ``keras.backend.backend()`` names them.
KERAS_BACKENDS = ("tensorflow", "jax", "torch")
#: The annotation around each fetch of a batch in a Keras fit on JAX, followed by ``/`` and
#: what feeds the fit (``tfbneck.keras_input/PyDataset``): the step waiting for its input.
KERAS_INPUT_EVENT = "tfbneck.keras_input"
#: The annotation around the wait for a step's results in a Keras fit on JAX: inside windows
#: the callback waits for them, so that a step's marker spans its computation (JAX dispatches
#: asynchronously): the training thread waiting for the model's math.
KERAS_STEP_WAIT_EVENT = "tfbneck.keras_step_wait"


def recorded_backend(sidecar: dict):
    """``{"backend": name, "input": kind, "no_xla": [layer class, ...]}`` from a sidecar's
    ``backend`` (one of :data:`KERAS_BACKENDS`), ``keras_input`` (kept when a non-empty string)
    and its model record's ``no_xla`` (the model's layers without XLA support, kept when a list
    of strings: :mod:`tfbneck_plugin.records`), or None when the sidecar names no backend it
    knows (an older callback, a watch capture)."""
    backend = sidecar.get("backend")
    if backend not in KERAS_BACKENDS:
        return None
    out = {"backend": backend}
    kind = sidecar.get("keras_input")
    if isinstance(kind, str) and kind:
        out["input"] = kind
    model = sidecar.get("model")
    no_xla = model.get("no_xla") if isinstance(model, dict) else None
    if isinstance(no_xla, list) and all(isinstance(name, str) for name in no_xla):
        out["no_xla"] = list(no_xla)
    return out
