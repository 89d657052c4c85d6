"""Attention layer throughput: keras_ctx vs keras.layers vs keras-hub, side by side.

Times a forward + backward pass of self-attention with a padding mask under
XLA (and without), alternating the implementations in one run, and prints
the median of several repeats. `--record` appends the table to
benchmarks/RESULTS.md with the machine and versions.

    python -m benchmarks.attention [--batch 16 --length 128 --hidden 256 --heads 4]
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

import keras_ctx
from benchmarks import common


def implementations(heads, key_dim):
    import keras_hub

    return {
        "keras_ctx.layers.MultiHeadAttention": lambda: keras_ctx.layers.MultiHeadAttention(
            heads, key_dim),
        "keras.layers.MultiHeadAttention": lambda: keras.layers.MultiHeadAttention(
            heads, key_dim),
        "keras_hub CachedMultiHeadAttention": lambda: keras_hub.layers.CachedMultiHeadAttention(
            heads, key_dim),
    }


def make_step(name, layer, x, mask, jit):
    if name.startswith("keras_ctx"):
        call = lambda: layer(x, padding_mask=mask)  # noqa: E731
    else:
        attention_mask = tf.cast(mask[:, None, :], "bool") & tf.ones(
            (1, x.shape[1], 1), "bool")
        call = lambda: layer(x, x, attention_mask=attention_mask)  # noqa: E731
    call()  # build

    @tf.function(jit_compile=jit)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(call(), "float32") ** 2)
        return tape.gradient(loss, layer.trainable_variables)

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(args.batch, args.length, args.hidden)), "float32")
    lengths = rng.integers(args.length // 2, args.length + 1, size=args.batch)
    mask = tf.constant(np.arange(args.length)[None] < lengths[:, None], "int32")

    rows = []
    for jit in (True, False):
        steps = {
            name: make_step(name, factory(), x, mask, jit)
            for name, factory in implementations(args.heads, args.hidden // args.heads).items()
        }
        for step in steps.values():
            step()  # compile
        times = {name: [] for name in steps}
        for _ in range(args.repeats):
            for name, step in steps.items():  # alternate, so drift hits all alike
                start = time.perf_counter()
                for _ in range(args.steps):
                    result = step()
                _ = [g.numpy() for g in result[:1]]
                times[name].append((time.perf_counter() - start) / args.steps)
        for name, values in times.items():
            median = float(np.median(values))
            tokens = args.batch * args.length / median
            rows.append((name, "on" if jit else "off", f"{median * 1e3:.2f}", f"{tokens:,.0f}"))

    title = (f"Self-attention forward+backward, batch {args.batch}, length {args.length}, "
             f"hidden {args.hidden}, {args.heads} heads, float32")
    table = common.table(["layer", "XLA", "ms/step (median)", "tokens/s"], rows)
    common.report("attention", title, table, args.record)


if __name__ == "__main__":
    main()
