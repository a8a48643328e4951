"""What a window trained: the Keras model's class, name, layer count and parameter count,
written in the window's sidecar (key ``model``) so that ``tfbneck compare`` can tell two
runs of one model from runs of two different models (the change measured between different
models is between two programs, not the effect of one change).

Read from the model the callback is attached to (``keras.Model.count_params``, ``.layers``);
never raises: a model that cannot say (not built, a custom object) records what it can.
"""
from __future__ import annotations

from typing import Any, Dict, Optional


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
    return out


def with_model(sidecar: Optional[Dict], model: Any) -> Optional[Dict]:
    """``sidecar`` with its ``model`` key set (:func:`model_fingerprint`); None stays None."""
    if sidecar is not None:
        fingerprint = model_fingerprint(model)
        if fingerprint:
            sidecar["model"] = fingerprint
    return sidecar
