"""A Keras 3 fit whose tf.data pipeline caches batches, shuffles them with a buffer larger than
the epoch (40 batches), then runs Keras augmentation layers (RandomFlip, RandomRotation,
RandomZoom) in a parallel map on whole batches: the layout of the Keras image-classification
tutorial with its augmentation moved into the pipeline. Two epochs; BottleneckProfiler
profiles steps 50-55 (the second epoch), where the shuffle buffer already holds the epoch and
calls neither the cache nor the source. Usage: cached_augment_fit.py LOG_DIR"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

LOG_DIR = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.random((64 * 40, 32, 32, 3), dtype=np.float32)
y = rng.integers(0, 10, 64 * 40)
augment = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1),
                            keras.layers.RandomZoom(0.1)])
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).cache().shuffle(1000)
ds = ds.map(lambda a, b: (augment(a, training=True), b), num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.prefetch(tf.data.AUTOTUNE)
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=2, verbose=0, callbacks=[BottleneckProfiler(LOG_DIR, profile_steps=(50, 55), analyze=False)])
print("DONE")
