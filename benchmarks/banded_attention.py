"""Banded (GPT-3 / GPT-Neo local) attention vs dense attention with the band masked in.

Times a forward + backward pass of causal self-attention whose band is
i - w < j <= i, three ways, under XLA:

- keras_ctx banded: `MultiHeadAttention(window_size=w)`, computed in blocks
  of w (scores (T/w, w, 2w) per head: O(T * w));
- keras_ctx dense + band mask: `MultiHeadAttention()` with the (T, T) band
  as `attention_mask` (scores (T, T): O(T^2));
- keras-hub dense + band mask: `keras_hub.layers.CachedMultiHeadAttention`
  with the same mask (keras-hub has no banded attention).

Each length runs in a fresh subprocess with TensorFlow's BFC allocator on the
CPU; there the implementations alternate (median of repeats), so their
ratios see the same machine load, and each step's peak allocator memory is
read from a run after its compiling call (scores, activations, gradients;
not the compiler).

    python -m benchmarks.banded_attention [--lengths 1024 2048 4096 8192 --window 256]
        [--batch 1 --hidden 256 --heads 4] [--repeats 5 --steps 3] [--record]
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

IMPLEMENTATIONS = ("keras_ctx banded", "keras_ctx dense + band mask",
                   "keras-hub dense + band mask")


def make_step(name, length, args):
    """A compiled forward + backward step of one implementation, and its inputs."""
    import tensorflow as tf

    import keras_ctx
    from keras_ctx.layers.banded_attention import band_mask

    key_dim = args.hidden // args.heads
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(args.batch, length, args.hidden)), "float32")
    if name == "keras_ctx banded":
        layer = keras_ctx.layers.MultiHeadAttention(args.heads, key_dim,
                                                    window_size=args.window)

        def call():
            return layer(x, use_causal_mask=True)
    else:
        if name.startswith("keras_ctx"):
            layer = keras_ctx.layers.MultiHeadAttention(args.heads, key_dim)
        else:
            import keras_hub

            layer = keras_hub.layers.CachedMultiHeadAttention(args.heads, key_dim)

        def call():
            positions = tf.range(length)
            mask = band_mask(positions, positions, args.window)[None]  # built in the step
            if name.startswith("keras_ctx"):
                return layer(x, attention_mask=mask)
            return layer(x, x, attention_mask=mask)

    call()  # build

    @tf.function(jit_compile=args.xla)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(call(), "float32") ** 2)
        return tape.gradient(loss, layer.trainable_variables)

    return step


def _run(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        result = step()
    result[0].numpy()
    return (time.perf_counter() - start) / steps


def _peak_mb(step):
    """The step's peak allocator memory in MB (None without the BFC allocator)."""
    import tensorflow as tf

    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        step()[0].numpy()
        return tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2**20
    except (ValueError, tf.errors.OpError):
        return None


def measure(length, args):
    """Compiles every implementation at one length; {name: (seconds per step, peak MB)}.

    Timing alternates the implementations, `args.steps` steps per turn,
    `args.repeats` turns, and takes the median. Peak memory: after its
    compiling call, each step runs once more with the allocator's statistics
    reset: what the step allocates (scores, activations, gradients), not
    the compiler.
    """
    steps = {name: make_step(name, length, args) for name in args.implementations}
    peaks = {}
    for name, step in steps.items():
        step()[0].numpy()  # compile
        peaks[name] = _peak_mb(step)
    times = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():  # alternate: drift hits all alike
            times[name].append(_run(step, args.steps))
    return {name: (float(np.median(times[name])), peaks[name]) for name in steps}


def measure_in_subprocess(length, args):
    """`measure` in a fresh process with TensorFlow's BFC allocator on the CPU,
    which keeps allocation statistics and reuses one pool across the
    implementations (the process holds the largest step's memory, not their sum)."""
    command = [sys.executable, "-m", "benchmarks.banded_attention", "--worker",
               "--lengths", str(length), "--implementations", *args.implementations,
               "--repeats", str(args.repeats), "--steps", str(args.steps),
               "--window", str(args.window), "--batch", str(args.batch),
               "--hidden", str(args.hidden), "--heads", str(args.heads),
               "--xla", "on" if args.xla else "off"]
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true")
    out = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return {name: tuple(value) for name, value in json.loads(line).items()}
    raise RuntimeError(f"worker T={length} failed (rc {out.returncode}; -9 is the "
                       f"out-of-memory killer):\n{out.stderr[-2000:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048, 4096, 8192])
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--xla", choices=("on", "off"), default="on")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--implementations", nargs="+", default=list(IMPLEMENTATIONS))
    parser.add_argument("--in-process", action="store_true",
                        help="measure here (no subprocess; memory only with the BFC allocator)")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.xla = args.xla == "on"

    if args.worker:
        print(json.dumps(measure(args.lengths[0], args)))
        return None

    from benchmarks import common

    load_start = common.load_average()
    header = ["T", "implementation", "ms/step (median)", "speed vs dense+mask",
              "step peak memory MB"]
    rows = []
    for length in args.lengths:
        results = (measure(length, args) if args.in_process
                   else measure_in_subprocess(length, args))
        reference = results.get("keras_ctx dense + band mask", (None,))[0]
        for name in args.implementations:
            seconds, peak = results[name]
            speedup = f"{reference / seconds:.2f}x" if reference else "-"
            memory = "-" if peak is None else f"{peak:,.0f}"
            rows.append((f"{length:,}", name, f"{seconds * 1e3:.1f}", speedup, memory))
            print(" | ".join(rows[-1]), flush=True)

    title = (f"causal self-attention forward+backward, band {args.window}, batch "
             f"{args.batch}, hidden {args.hidden}, {args.heads} heads, float32, "
             f"XLA {'on' if args.xla else 'off'}")
    table = common.table(header, rows)
    note = (f"Median of {args.repeats} x {args.steps} steps, the implementations alternated "
            "in one process per length; memory: the step's peak in TensorFlow's CPU "
            f"(BFC) allocator. Load average (1, 5, 15 min) at start {load_start}, at end "
            f"{common.load_average()}.")
    common.report("banded_attention", title, table + "\n\n" + note, args.record)
    return rows


if __name__ == "__main__":
    main()
