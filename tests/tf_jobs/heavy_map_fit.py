"""A Keras fit whose tf.data map does heavy CPU work, profiled by the stock TensorBoard
callback with profile_batch=(5, 10). Usage: heavy_map_fit.py LOGDIR [keras3|tf_keras]

With tf_keras, set TF_USE_LEGACY_KERAS=1 before running (the test does)."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
logdir, flavour = sys.argv[1], sys.argv[2]
import tensorflow as tf  # noqa: E402

if flavour == "tf_keras":
    import tf_keras as keras  # noqa: E402
else:
    import keras  # noqa: E402

tf.random.set_seed(0)


def heavy(x, y):
    # 200 elementwise passes over the feature vector: far more CPU work per batch than the model.
    for _ in range(200):
        x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
    return x, y


features = tf.random.normal([2048, 512], seed=1)
labels = tf.random.uniform([2048], 0, 10, tf.int32, seed=2)
ds = tf.data.Dataset.from_tensor_slices((features, labels)).map(heavy).batch(32)
model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, steps_per_epoch=14, verbose=0,
          callbacks=[keras.callbacks.TensorBoard(logdir, profile_batch=(5, 10))])
print("DONE")
