"""What a window trained: the Keras model's class, name, layer count and parameter count,
written in the window's sidecar (key ``model``) so that ``tfbneck compare`` can tell two
runs of one model from runs of two different models (the change measured between different
models is between two programs, not the effect of one change); and, on Keras 3, the classes of
its layers that do not support XLA, with which Keras compiles the model without XLA whatever
``jit_compile`` says (so that the advice does not offer a switch that does nothing).

Read from the model the callback is attached to (``keras.Model.count_params``, ``.layers``);
never raises: a model that cannot say (not built, a custom object) records what it can.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional


def model_fingerprint(model: Any) -> Optional[Dict[str, Any]]:
    """``{"class", "name", "layers", "params"}`` of a Keras model (``params``: the number of
    weights' elements, trainable or not; ``layers``: its top-level layers), any of them left
    out when the model cannot say; None without a model."""
    if model is None:
        return None
    out: Dict[str, Any] = {"class": type(model).__name__}
    try:
        out["name"] = str(model.name)
    except Exception:  # noqa: BLE001 - a custom model's property may raise anything
        pass
    try:
        out["layers"] = int(len(model.layers))
    except Exception:  # noqa: BLE001
        pass
    try:
        out["params"] = int(model.count_params())
    except Exception:  # noqa: BLE001 - an unbuilt model raises ValueError; custom ones anything
        pass
    no_xla = layers_without_xla(model)
    if no_xla is not None:
        out["no_xla"] = no_xla
    return out


def layers_without_xla(model: Any) -> Optional[List[str]]:
    """The sorted class names of the outermost of the model's layers (nested ones included) whose
    ``supports_jit`` is False: Keras 3 then compiles the model without XLA, ``jit_compile=True``
    included (it warns "Model doesn't support `jit_compile=True`": keras/src/trainers/trainer.py,
    ``model_supports_jit`` over ``model._flatten_layers()``; TextVectorization, StringLookup,
    Hashing, RandomRotation, RandomZoom, RandomTranslation, RandomCrop, ... set it False). A
    layer inside one already named is not named again (TextVectorization holds a StringLookup the
    user never wrote). ``[]``: every layer supports XLA; None: the model cannot say (tf.keras 2
    layers have no ``supports_jit``)."""
    try:
        if not hasattr(model, "_flatten_layers") or not hasattr(model, "supports_jit"):
            return None
        names = set()
        pending = [model]
        while pending:
            layer = pending.pop()
            if layer.supports_jit is False:
                names.add(type(layer).__name__)
                continue
            pending.extend(layer._flatten_layers(include_self=False, recursive=False))
        return sorted(names)
    except Exception:  # noqa: BLE001 - a custom model's layers may raise anything
        return None


def with_model(sidecar: Optional[Dict], model: Any) -> Optional[Dict]:
    """``sidecar`` with its ``model`` key set (:func:`model_fingerprint`); None stays None."""
    if sidecar is not None:
        fingerprint = model_fingerprint(model)
        if fingerprint:
            sidecar["model"] = fingerprint
    return sidecar
