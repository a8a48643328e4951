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
    """``{"backend": name, "input": kind}`` from a sidecar's ``backend`` (one of
    :data:`KERAS_BACKENDS`) and ``keras_input`` (kept when a non-empty string), or None when
    the sidecar names no backend it knows (an older callback, a watch capture)."""
    backend = sidecar.get("backend")
    if backend not in KERAS_BACKENDS:
        return None
    kind = sidecar.get("keras_input")
    return {"backend": backend, **({"input": kind} if isinstance(kind, str) and kind else {})}
