"""Make a large real trace: a Keras 3 fit of a small MLP profiled over many steps, or a
larger one made of a real one repeated in time.

Usage:
    python benchmarks/make_large_trace.py OUTDIR [--steps 1000]
    python benchmarks/make_large_trace.py OUTDIR --tile TRACE --size-mb 1024

Prints the path of the .xplane.pb it wrote.

Profiled (TensorFlow needed): about 65 MB and 1.1 million events for 1000 steps with TF
2.21 on a 2-core machine. The profiler holds a whole session in memory, and ran out of it
at ~49,000 steps (~2.5 GB of trace) on a 23 GB machine: larger traces are tiled.

``--tile TRACE``: the trace TRACE repeated in time until the file reaches ``--size-mb``
(no TensorFlow): every line holds its events once per copy, copy k shifted by k times the
trace's span (rounded up to 1 ms), so that the steps follow each other as in a longer run;
names, stats and ids repeat (a step number occurs once per copy). The file is written as it
is made, a line of one copy at a time: memory holds the parsed TRACE (protobuf, ~6x its
size) and one serialized line, never the output.
"""
import argparse
import glob
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: Copies of a tiled trace are this far apart at least (ps): 1 ms.
GAP_PS = 10 ** 9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--tile", metavar="TRACE", help="repeat this .xplane.pb in time instead of profiling")
    ap.add_argument("--size-mb", type=float, default=1024.0, help="with --tile: the size to reach (MiB)")
    args = ap.parse_args()
    if args.tile:
        out = os.path.join(args.outdir, "plugins", "profile", "tiled", os.path.basename(args.tile))
        tile(args.tile, out, int(args.size_mb * 2 ** 20))
        print(out)
        return
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


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int) -> bytes:
    """The tag of a length-delimited field."""
    return _varint(field << 3 | 2)


def _span_ps(space) -> int:
    """From the first event's start to the last event's end, over every line (ps)."""
    lo, hi = None, None
    for plane in space.planes:
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for ev in line.events:
                s = base + ev.offset_ps
                lo = s if lo is None or s < lo else lo
                hi = s + ev.duration_ps if hi is None or s + ev.duration_ps > hi else hi
    return 0 if lo is None else hi - lo


def _shift(line, by_ps: int) -> None:
    for ev in line.events:  # an aggregated event (num_occurrences) becomes a timed one: none in TF's host traces
        ev.offset_ps += by_ps


def tile(src: str, out: str, size: int) -> None:
    """Write ``src`` repeated in time into ``out`` until it holds about ``size`` bytes (see
    the module's docstring). Each line is written as its header, then its events once per
    copy, shifted in place in the parsed trace and serialized one copy at a time; the
    lengths the XSpace's framing needs ahead of the bytes are measured in a first pass
    (``ByteSize``) that shifts the same way."""
    from tfbneck_plugin.trace import xspace

    with open(src, "rb") as f:
        space = xspace.XSpace.FromString(f.read())
    period = -(-(_span_ps(space) + GAP_PS) // GAP_PS) * GAP_PS
    copies = max(1, math.ceil(size / os.path.getsize(src)))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        for plane in space.planes:
            header = xspace.XPlane()
            header.CopyFrom(plane)
            del header.lines[:]
            lines = []  # (line's header bytes, the events-only line, its bytes per copy)
            for line in plane.lines:
                head = xspace.XLine()
                head.CopyFrom(line)
                del head.events[:]
                for name in ("id", "name", "timestamp_ns", "duration_ps", "display_id", "display_name"):
                    line.ClearField(name)  # what stays serializes as the events alone
                sizes = []
                for k in range(copies):
                    sizes.append(line.ByteSize())
                    _shift(line, period)
                _shift(line, -copies * period)
                lines.append((head.SerializeToString(), line, sizes))
            head_bytes = header.SerializeToString()
            body = [len(h) + sum(s) for h, _, s in lines]
            f.write(_key(1) + _varint(len(head_bytes) + sum(len(_key(3)) + len(_varint(n)) + n for n in body)))
            f.write(head_bytes)
            for (h, line, sizes), n in zip(lines, body):
                f.write(_key(3) + _varint(n) + h)
                for k in range(copies):
                    data = line.SerializeToString()
                    assert len(data) == sizes[k]
                    f.write(data)
                    _shift(line, period)
            del lines
        rest = xspace.XSpace()
        rest.CopyFrom(space)
        del rest.planes[:]
        f.write(rest.SerializeToString())


if __name__ == "__main__":
    main()
