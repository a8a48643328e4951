"""A Keras fit of a small MLP whose middle layer (``wide``) has WIDTH units, profiled by
BottleneckProfiler over steps 4-9 (the analysis drops the warm-up).
Usage: width_fit.py LOGDIR WIDTH [keras3|tf_keras]

Two runs differing only in WIDTH differ in the ``wide`` layer's ops (its MatMul and their
gradients) and, far less, in the output layer's (WIDTH x 10 weights)."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
logdir, width = sys.argv[1], int(sys.argv[2])
flavour = sys.argv[3] if len(sys.argv) > 3 else "keras3"
import tensorflow as tf  # noqa: E402

if flavour == "tf_keras":
    import tf_keras as keras  # noqa: E402
else:
    import keras  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

tf.random.set_seed(0)
features = tf.random.normal([4096, 256], seed=1)
labels = tf.random.uniform([4096], 0, 10, tf.int32, seed=2)
ds = tf.data.Dataset.from_tensor_slices((features, labels)).batch(512).repeat().prefetch(2)
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(256, activation="relu", name="first"),
                          keras.layers.Dense(width, activation="relu", name="wide"),
                          keras.layers.Dense(10, name="head")])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, steps_per_epoch=12, verbose=0,
          callbacks=[BottleneckProfiler(logdir, profile_steps=(4, 9), analyze=False)])
print("DONE")
