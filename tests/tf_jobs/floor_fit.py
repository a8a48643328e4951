"""A small Keras fit profiled by BottleneckProfiler(profile_steps=(3, 5)), for
tests/test_tf_floor.py on whatever TensorFlow is installed (the declared floor in the
lowest-versions job, the newest release in the main one).

    python floor_fit.py OUT_DIR      # TF_USE_LEGACY_KERAS=1 for tf-keras

Writes OUT_DIR/result.json: versions, the Keras flavour, and each window's status.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

from tfbneck_plugin import BottleneckProfiler

out = os.path.abspath(sys.argv[1])
keras = tf.keras
x = np.random.RandomState(0).rand(256, 8).astype("float32")
y = x.sum(axis=1, keepdims=True)
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)  # 16 steps in one epoch
model = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
model.compile("sgd", "mse")
cb = BottleneckProfiler(os.path.join(out, "logs"), profile_steps=(3, 5), sample_interval_s=0.05)
model.fit(ds, epochs=1, verbose=0, callbacks=[cb])
cb.close(wait=True, timeout=120)
result = {"tensorflow": tf.__version__, "keras": getattr(keras, "__version__", "?"),
          "legacy": os.environ.get("TF_USE_LEGACY_KERAS") == "1",
          "windows": [getattr(w, "status", None) for w in cb.windows]}
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump(result, f)
print("DONE", json.dumps(result))
