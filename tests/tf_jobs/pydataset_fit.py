"""A Keras 3 fit fed by a PyDataset whose __getitem__ does heavy numpy work on one thread,
profiled by BottleneckProfiler (steps 4-8, system metrics on). Usage: pydataset_fit.py LOG_DIR"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402


class Batches(keras.utils.PyDataset):
    """32 x 64 features per batch, each made by ~40 ms of numpy work (trigonometry on a 256k array)."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        work = rng.standard_normal(1 << 18)
        for _ in range(12):
            work = np.sin(work) * 1.0001 + np.cos(work) * 0.0001
        x = work[: 32 * 64].reshape(32, 64).astype("float32")
        return x, rng.integers(0, 10, 32)


model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(Batches(), epochs=1, verbose=0, callbacks=[BottleneckProfiler(sys.argv[1], profile_steps=(4, 8),
                                                                          analyze=False)])
print("DONE")
