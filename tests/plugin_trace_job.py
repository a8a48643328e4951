"""Makes the small, real traces that the plugin's tests read. Run in a subprocess by
``plugin_helpers.make_tf_traces`` (TensorFlow is imported here, never by the plugin).

Usage: python plugin_trace_job.py OUTDIR

Writes three runs, in both Keras layouts:

* ``keras3/before/train/plugins/profile/<session>/``: Keras 3, a heavy per-element ``map``
  without parallelism or prefetch (the step waits for input), with the system metrics
  sampled during ``fit`` (``tfbneck_system_metrics.json``);
* ``keras3/after/train/plugins/profile/<session>/``: the same model fed from data
  preprocessed once, with prefetch and a larger model (the model math dominates);
* ``tfkeras/plugins/profile/<session>/``: tf-keras (Keras 2), whose run folder is the
  ``log_dir`` itself.
"""
import glob
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402

from tfbneck_plugin.system.sampler import SystemSampler  # noqa: E402
from tfbneck_plugin.records import write_sidecar  # noqa: E402

OUT = sys.argv[1]
N, D = 2048, 256


def heavy(x, y):
    for _ in range(30):
        x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
    return x, y


def serial(ds):
    """The pipeline as written, one map call at a time: TensorFlow's default map_parallelization
    and injected prefetch would run the heavy map on both cores ahead of the step, leaving the
    input share near the 20 % threshold (a CI run read python_overhead)."""
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def data():
    tf.random.set_seed(0)
    return tf.random.normal([N, D]), tf.random.uniform([N], 0, 10, tf.int32)


def newest_session(run_dir):
    sessions = sorted(glob.glob(os.path.join(run_dir, "plugins", "profile", "*")))
    return sessions[-1]


def fit(keras, log_dir, ds, widths, sample):
    layers = [keras.Input((D,))] + [keras.layers.Dense(w, activation="relu") for w in widths] + [keras.layers.Dense(10)]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    sampler = SystemSampler(interval_s=0.05).start() if sample else None
    model.fit(ds, epochs=1, steps_per_epoch=14, verbose=0,
              callbacks=[keras.callbacks.TensorBoard(log_dir, profile_batch=(5, 10))])
    if sampler is not None:
        return sampler.stop()
    return None


def main():
    import keras  # Keras 3
    import tf_keras

    x, y = data()
    before = serial(tf.data.Dataset.from_tensor_slices((x, y)).map(heavy).batch(64).repeat())
    metrics = fit(keras, os.path.join(OUT, "keras3", "before"), before, [64], sample=True)
    write_sidecar(newest_session(os.path.join(OUT, "keras3", "before", "train")), metrics)

    xp, _ = heavy(x, y)  # preprocess once, outside the pipeline
    after = tf.data.Dataset.from_tensor_slices((xp, y)).batch(64).repeat().prefetch(tf.data.AUTOTUNE)
    fit(keras, os.path.join(OUT, "keras3", "after"), after, [512], sample=False)

    tfk = serial(tf.data.Dataset.from_tensor_slices((x, y)).map(heavy).batch(64).repeat())
    fit(tf_keras, os.path.join(OUT, "tfkeras"), tfk, [64], sample=False)


if __name__ == "__main__":
    main()
