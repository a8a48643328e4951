"""Makes the traces of tests/data/compare_renames/ (tests/test_compare_renames.py): real TensorFlow
2.21 / Keras 3 runs on this CPU host of one small Dense MLP (64-128-128-4, batch 32, Adam),
profiled by ``BottleneckProfiler(logdir, profile_steps=(10, 14))``:

=======  =========================================================================================
folder   run
=======  =========================================================================================
once     the model built once in the process: layers ``dense``, ``dense_1``, ``dense_2`` of
         ``sequential``
twice    the same model built twice, the second one trained: Keras names its layers ``dense_3``,
         ``dense_4``, ``dense_5`` of ``sequential_1`` (``keras.backend.get_uid``), so every op
         name differs from ``once``'s by its scopes' instance numbers
wider    built once, the second hidden layer 1024 units wide instead of 128: a real change
=======  =========================================================================================

Usage (repository root, the project's virtual environment): ``python tests/data/compare_renames/
make.py KIND LOGDIR`` with KIND ``once``, ``twice`` or ``wider``; then copy LOGDIR here. A remade
trace changes the numbers the tests compute from it, not the tests.
"""
import sys

import numpy as np


def _model(keras, width: int):
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                             keras.layers.Dense(width, activation="relu"), keras.layers.Dense(4)])


def main(kind: str, logdir: str) -> None:
    import keras
    import tensorflow as tf
    from tfbneck_plugin import BottleneckProfiler

    tf.random.set_seed(0)
    x = np.random.RandomState(0).rand(32 * 20, 64).astype("float32")
    y = np.random.RandomState(1).randint(0, 4, 32 * 20)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    if kind == "twice":
        _model(keras, 128)  # built and dropped: it takes the first names
    model = _model(keras, 1024 if kind == "wider" else 128)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=1, verbose=0, callbacks=[BottleneckProfiler(logdir, profile_steps=(10, 14))])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
