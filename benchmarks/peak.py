"""Measured matmul peak of this machine: the denominator of MFU.

Times a large square matmul (`tf.linalg.matmul`, TensorFlow's oneDNN kernel,
the fastest path on CPU; also the cuBLAS path on GPU) in float32 and, when
asked, bfloat16, and reports the best median FLOP/s over a few sizes:
2 n^3 FLOPs per matmul.

    python -m benchmarks.peak [--precision float32 bfloat16] [--sizes 1024 2048 4096]
"""

import argparse
import time

import numpy as np


def measure(dtype="float32", sizes=(1024, 2048, 4096), repeats=5, min_seconds=0.3):
    """Best-of-sizes median FLOP/s of an n x n matmul in `dtype`."""
    import tensorflow as tf

    best = 0.0
    for n in sizes:
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)

        @tf.function
        def product(a, b, count):
            total = tf.zeros((), "float32")
            for _ in tf.range(count):
                c = tf.linalg.matmul(a, b)
                total += tf.cast(c[0, 0], "float32")
            return total

        product(a, b, tf.constant(1)).numpy()
        start = time.perf_counter()
        product(a, b, tf.constant(1)).numpy()
        single = max(time.perf_counter() - start, 1e-6)
        count = max(1, int(min_seconds / single))
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            product(a, b, tf.constant(count)).numpy()
            rates.append(2.0 * n**3 * count / (time.perf_counter() - start))
        best = max(best, float(np.median(rates)))
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--precision", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1024, 2048, 4096])
    args = parser.parse_args(argv)
    for dtype in args.precision:
        print(f"{dtype}: {measure(dtype, args.sizes) / 1e9:,.1f} GFLOP/s")


if __name__ == "__main__":
    main()
