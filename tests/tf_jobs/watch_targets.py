"""Programs that ``tfbneck watch`` is pointed at in tests/test_watch.py, each limited by one
known resource.

    watch_targets.py busy SECONDS               a Python busy loop (one thread at 100 %)
    watch_targets.py reads FOLDER SECONDS       files read one by one, each open delayed 3 ms
                                                (a network file system's latency), little CPU
    watch_targets.py keras SECONDS              a compute-bound Keras fit on the CPU
    watch_targets.py server PORT LOGDIR SECONDS a Keras fit with a heavy sequential tf.data map,
                                                running TensorFlow's profiler server
                                                (BottleneckProfiler(profiler_server_port=PORT))
    watch_targets.py worker INDEX ADDR0 ADDR1 STEPS
                                                one worker of a 2-worker MultiWorkerMirroredStrategy
                                                fit (tf-keras) with a large model: its all-reduce
                                                crosses the link between ADDR0 and ADDR1

Each prints ``ready`` on stdout once its limited phase begins, then runs SECONDS more.
"""
import os
import sys
import time


def busy(seconds: float) -> None:
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def reads(folder: str, seconds: float) -> None:
    os.makedirs(folder, exist_ok=True)
    names = []
    for i in range(200):
        path = os.path.join(folder, f"r{i}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(2048))
        names.append(path)
    print("ready", flush=True)
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        time.sleep(0.003)  # the storage's latency per open
        with open(names[i % len(names)], "rb") as f:
            f.read()
        i += 1


def _dense_model(tf, units: int, inputs: int):
    m = tf.keras.Sequential([tf.keras.Input((inputs,)), tf.keras.layers.Dense(units, activation="relu"),
                             tf.keras.layers.Dense(units, activation="relu"), tf.keras.layers.Dense(1)])
    m.compile("sgd", "mse")
    return m


class _Ready:
    """Keras callback: says ``ready`` after a few steps, stops after ``seconds``."""

    def __new__(cls, tf, seconds: float):
        class Ready(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == 3 and not hasattr(self, "end"):
                    self.end = time.monotonic() + seconds
                    print("ready", flush=True)
                if hasattr(self, "end") and time.monotonic() > self.end:
                    self.model.stop_training = True
        return Ready()


def keras(seconds: float) -> None:
    import numpy as np
    import tensorflow as tf
    x = np.random.rand(4096, 512).astype("float32")
    y = np.random.rand(4096, 1).astype("float32")
    # Batches of 1024: the model's math fills both cores for most of each step (at 256 the
    # Keras loop's Python between steps left the tree at 1.71-1.79 of 2 cores, under the
    # flowchart's 90 %: a run that is not quite compute-bound).
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(1024).cache().repeat()
    _dense_model(tf, 2048, 512).fit(ds, epochs=1, steps_per_epoch=10**6, verbose=0, callbacks=[_Ready(tf, seconds)])


def server(port: int, logdir: str, seconds: float) -> None:
    import tensorflow as tf
    from tfbneck_plugin import BottleneckProfiler

    def heavy(x):
        for _ in range(60):
            x = tf.sin(x) + tf.cos(x)
        return x, tf.reduce_sum(x, keepdims=True)
    opts = tf.data.Options()
    opts.autotune.enabled = False
    ds = tf.data.Dataset.range(10**7).map(lambda i: tf.fill([256], tf.cast(i, tf.float32))).map(heavy).batch(32)
    ds = ds.with_options(opts)
    cb = BottleneckProfiler(logdir, profile_steps=(10**8, 10**8 + 1), profiler_server_port=port, verbose=0,
                            system_interval_s=None)
    _dense_model(tf, 64, 256).fit(ds, epochs=1, steps_per_epoch=10**6, verbose=0, callbacks=[cb, _Ready(tf, seconds)])


def worker(index: int, addr0: str, addr1: str, seconds: float) -> None:
    import json
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [addr0, addr1]}, "task": {"type": "worker",
                                                                                          "index": index}})
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # Keras 3's fit fails under MultiWorkerMirroredStrategy (TF 2.21)
    import numpy as np
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x = np.random.rand(512, 256).astype("float32")
    y = np.random.rand(512, 1).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    with strategy.scope():
        model = _dense_model(tf, 1024, 256)  # ~1.3 M parameters: ~5 MB of gradients per step
    # Both workers run the same number of steps (stopping one alone would hang the other in
    # its all-reduce); the test ends them once it has watched.
    model.fit(ds, epochs=1, steps_per_epoch=int(seconds), verbose=0, callbacks=[_Ready(tf, 1e9)])


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "busy":
        busy(float(args[0]))
    elif mode == "reads":
        reads(args[0], float(args[1]))
    elif mode == "keras":
        keras(float(args[0]))
    elif mode == "server":
        server(int(args[0]), args[1], float(args[2]))
    elif mode == "worker":
        worker(int(args[0]), args[1], args[2], float(args[3]))
    else:
        sys.exit(f"unknown mode {mode}")
