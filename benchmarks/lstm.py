"""LSTM throughput: keras_ctx LSTMP's XLA-compilable loop vs the cuDNN path.

Times a forward + backward pass of one LSTM layer over a right-padded batch:

- `LSTMP loop`, with and without XLA (`tf.scan`; what ELMo/CoVe use under
  `jit_compile=True`);
- `LSTMP cudnn` (plain LSTM on GPU: Keras' CudnnRNNV3 kernel; XLA off only);
- `keras.layers.LSTM` (picks cuDNN on GPU when eligible; XLA off only, since
  cuDNN has no XLA kernel), and with `use_cudnn=False` under XLA;
- `LSTMP loop + projection/clip` (ELMo's cell; no cuDNN equivalent).

Alternates the implementations in one run and prints medians. `--record`
appends the table to benchmarks/RESULTS.md with the machine and versions.

    python -m benchmarks.lstm [--batch 32 --length 64 --features 512 --units 1024]
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

from benchmarks import common
from keras_ctx.layers.lstm import LSTMP


def candidates(units, projection, gpu):
    elmo = (f"LSTMP loop + projection {projection}, clips 3",
            lambda: LSTMP(units, projection_dim=projection, cell_clip=3.0, projection_clip=3.0,
                          implementation="loop"))
    rows = [
        ("LSTMP loop", True, lambda: LSTMP(units, implementation="loop")),
        ("LSTMP loop", False, lambda: LSTMP(units, implementation="loop")),
        (elmo[0], True, elmo[1]),
        (elmo[0], False, elmo[1]),
        ("keras.layers.LSTM use_cudnn=False", True,
         lambda: keras.layers.LSTM(units, return_sequences=True, use_cudnn=False)),
        ("keras.layers.LSTM (auto)", False,
         lambda: keras.layers.LSTM(units, return_sequences=True)),
    ]
    if gpu:
        rows.append(("LSTMP cudnn", False, lambda: LSTMP(units, implementation="cudnn")))
    return rows


def matmul_flops(args, projection):
    """Forward + backward (3x) matmul FLOPs per token: x W, h U (and m P)."""
    out = args.projection if projection else args.units
    forward = 2 * (args.features * 4 * args.units + out * 4 * args.units)
    if projection:
        forward += 2 * args.units * args.projection
    return 3 * forward


def make_step(layer, x, mask, jit):
    layer(x, mask=mask)  # build

    @tf.function(jit_compile=jit)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(layer(x, mask=mask), "float32") ** 2)
        return tape.gradient(loss, layer.trainable_variables)

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--projection", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)

    gpu = bool(tf.config.list_physical_devices("GPU"))
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(args.batch, args.length, args.features)), "float32")
    lengths = rng.integers(args.length // 2, args.length + 1, size=args.batch)
    mask = tf.constant(np.arange(args.length)[None] < lengths[:, None])

    steps = {}
    for name, jit, factory in candidates(args.units, args.projection, gpu):
        steps[(name, jit)] = make_step(factory(), x, mask, jit)
    for step in steps.values():
        step()  # compile
    times = {key: [] for key in steps}
    for _ in range(args.repeats):
        for key, step in steps.items():  # alternate, so drift hits all alike
            start = time.perf_counter()
            for _ in range(args.steps):
                result = step()
            _ = [g.numpy() for g in result[:1]]
            times[key].append((time.perf_counter() - start) / args.steps)
    rows = []
    for (name, jit), values in times.items():
        median = float(np.median(values))
        tokens = args.batch * args.length / median
        flops = matmul_flops(args, "projection" in name) * args.batch * args.length
        rows.append((name, "on" if jit else "off", f"{median * 1e3:.2f}", f"{tokens:,.0f}",
                     f"{flops / median / 1e9:.4g}"))

    title = (f"LSTM forward+backward, batch {args.batch}, length {args.length}, "
             f"features {args.features}, units {args.units}, float32, right padding")
    table = common.table(["layer", "XLA", "ms/step (median)", "tokens/s",
                          "matmul GFLOP/s"], rows)
    table += ("\n\nmatmul GFLOP/s: the layer's matrix products (forward + backward = 3x "
              "forward; padded steps counted) over the median time; compare with "
              f"`python -m benchmarks.peak`. Load average (1, 5, 15 min) at end "
              f"{common.load_average()}.")
    common.report("lstm", title, table, args.record)
    return rows


if __name__ == "__main__":
    main()
