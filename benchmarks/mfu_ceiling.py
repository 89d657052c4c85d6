"""The MFU a BERT MLM training step could reach if everything but its matmuls were free.

Runs exactly the matrix products of one keras_ctx BERT MLM training step
(forward and both backward products of every dense layer, the per-head
attention products, the tied vocabulary projection; the last layer at the
selected rows only, as `sparse_last_layer` does) at their real shapes, with
nothing else, and compares their time with the measured matmul peak
(benchmarks/peak.py). The result bounds the MFU of the whole step: softmax,
layer norms, GELU, dropout, the optimizer and the loss only add time.

    python -m benchmarks.mfu_ceiling [--layers 4 --hidden 256 --batch 16 --length 128] [--record]
"""

import argparse
import time

import numpy as np

from benchmarks import common, peak
from benchmarks.train_throughput import DEFAULTS, VOCABULARY, model_flops, num_predictions


def dense(rows, fan_in, fan_out):
    """A dense layer's forward product and its two gradients: (m, k, n) triples."""
    return [(rows, fan_in, fan_out), (rows, fan_out, fan_in), (fan_in, rows, fan_out)]


def attention(batch_heads, queries, keys, head_size):
    """Scores Q K^T and context P V, forward and gradients, as batched (b, m, k, n)."""
    forward = [(batch_heads, queries, head_size, keys), (batch_heads, queries, keys, head_size)]
    backward = [(batch_heads, queries, keys, head_size), (batch_heads, keys, queries, head_size),
                (batch_heads, queries, head_size, keys), (batch_heads, keys, queries, head_size)]
    return forward + backward


def bert_step_products(layers, hidden, heads, batch, length):
    """(batch, m, k, n) of every product in one BERT MLM step; batch 1 = a plain matmul."""
    tokens, selected = batch * length, batch * num_predictions(length)
    ffn, head_size = 4 * hidden, hidden // heads
    plain = []
    for layer in range(layers):
        rows = selected if layer == layers - 1 else tokens  # sparse last layer
        plain += dense(tokens, hidden, hidden) * 2  # keys, values: every row
        plain += dense(rows, hidden, hidden) * 2  # queries, output projection
        plain += dense(rows, hidden, ffn) + dense(rows, ffn, hidden)
    plain += dense(selected, hidden, hidden) + dense(selected, hidden, VOCABULARY["bert"])
    batched = []
    for layer in range(layers):
        queries = num_predictions(length) if layer == layers - 1 else length
        batched += attention(batch * heads, queries, length, head_size)
    return [(1,) + p for p in plain] + batched


def time_products(products, repeats=5):
    """Median seconds to run all products once, XLA-compiled, results kept alive."""
    import tensorflow as tf

    operands = [(tf.random.normal((b, m, k)), tf.random.normal((b, k, n)))
                for b, m, k, n in products]

    @tf.function(jit_compile=True)
    def run(operands):
        # A sum of each product keeps it alive (k >= 64: < 2% of the work).
        return tf.add_n([tf.reduce_sum(tf.matmul(a, b)) for a, b in operands])

    run(operands).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(operands).numpy()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, value in DEFAULTS.items():
        parser.add_argument(f"--{name}", type=int, default=value)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    products = bert_step_products(args.layers, args.hidden, args.heads, args.batch, args.length)
    executed = sum(2.0 * b * m * k * n for b, m, k, n in products)
    spec = dict(vars(args), model="bert")
    model = model_flops(spec, "keras_ctx")
    peak_rate = peak.measure("float32", sizes=(2048,))
    seconds = time_products(products)
    peak_after = peak.measure("float32", sizes=(2048,))
    peak_rate = max(peak_rate, peak_after)
    rows = [(f"{len(products)}", f"{executed / 1e9:,.2f}", f"{seconds * 1e3:.1f}",
             f"{executed / seconds / 1e9:,.1f}", f"{100 * executed / seconds / peak_rate:.1f}%",
             f"{100 * model / seconds / peak_rate:.1f}%")]
    header = ["products", "executed GFLOP", "ms (median)", "GFLOP/s",
              "matmul efficiency", "MFU ceiling"]
    title = (f"BERT MLM step, its matmuls alone, L{args.layers} H{args.hidden} A{args.heads}, "
             f"batch {args.batch}, length {args.length}, float32 + XLA")
    text = (common.table(header, rows) + "\n\n"
            f"Peak (measured matmul, best of before/after): {peak_rate / 1e9:,.0f} GFLOP/s; "
            f"model FLOPs/step {model / 1e9:,.2f} G. The MFU ceiling is the model FLOPs "
            "over the time of the matmuls alone: what the step would reach if nothing "
            "else took time.")
    common.report("mfu_ceiling", title, text, args.record)
    return rows


if __name__ == "__main__":
    main()
