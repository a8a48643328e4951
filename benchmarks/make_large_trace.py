"""Make a large real trace: a Keras 3 fit of a small MLP profiled over many steps.

Usage: python benchmarks/make_large_trace.py OUTDIR [--steps 1000]
Prints the path of the .xplane.pb it wrote. About 65 MB and 1.1 million events for
1000 steps with TF 2.21 on a 2-core machine.
"""
import argparse
import glob
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()
    import keras
    import tensorflow as tf

    x = tf.random.normal([args.steps * 16 + 64, 64], seed=0)
    y = tf.random.uniform([args.steps * 16 + 64], 0, 10, tf.int32, seed=1)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).map(
        lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(2)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=1, steps_per_epoch=args.steps + 4, verbose=0,
              callbacks=[keras.callbacks.TensorBoard(args.outdir, profile_batch=(3, args.steps + 2))])
    files = glob.glob(os.path.join(args.outdir, "**", "*.xplane.pb"), recursive=True)
    print(max(files, key=os.path.getmtime))


if __name__ == "__main__":
    main()
