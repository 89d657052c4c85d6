"""BERT MLM training step on the backend Keras runs: keras_ctx vs keras-hub, side by side.

The same shapes as `accelerator_mlm` (random tokens, `--predictions` masked positions per
sequence, AdamW), through each library's own `train_on_batch` on whichever backend
KERAS_BACKEND names: TensorFlow (its default `jit_compile="auto"`: no XLA on a CPU),
JAX (`jax.jit`) or PyTorch (eager). The two models are timed in turns (`--rounds` rounds
of `--steps` steps each, after `--warmup` steps), so both see the same machine state;
the table gives each one's median ms per step over the rounds.

    KERAS_BACKEND=torch python -m benchmarks.backend_mlm --size mini [--record]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


from benchmarks.accelerator_mlm import (BERT_BASE, keras_ctx_data, keras_ctx_model,  # noqa: E402
                                        keras_hub_model, make_batch)

# bert-mini (Turc et al. 2019's L4 H256 A4) and BERT-base.
SIZES = {"mini": dict(layers=4, hidden=256, heads=4, intermediate=1024, vocabulary=30522),
         "base": BERT_BASE}


def build(name, config, batch, dropout):
    """(model, a function running one training step on the batch and returning its loss)."""
    import keras

    x, y, weights = batch
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01)
    if name == "keras_ctx":
        model = keras_ctx_model(config, dropout)
        model.compile(optimizer=optimizer)
        data = keras_ctx_data(x, y, weights)

        def step():
            return model.train_on_batch(data, return_dict=True)["loss"]
    else:
        model = keras_hub_model(config, dropout)
        model.compile(optimizer=optimizer)

        def step():
            return model.train_on_batch(x, y, weights, return_dict=True)["loss"]
    return model, step


def _synchronise():
    import keras

    if keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()


def time_steps(step, steps):
    """Milliseconds per step over `steps` steps (the loss read back: the device is done)."""
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    float(loss)
    _synchronise()
    return 1000 * (time.perf_counter() - start) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="mini")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="float32",
                        help="a Keras dtype policy, e.g. mixed_bfloat16")
    parser.add_argument("--record", action="store_true",
                        help="append the table to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)

    import keras

    keras.config.set_dtype_policy(args.precision)
    config = SIZES[args.size]
    batch = make_batch(args.batch, args.length, args.predictions, config["vocabulary"])
    steppers = {}
    for name in ("keras_ctx", "keras_hub"):
        keras.utils.set_random_seed(0)
        steppers[name] = build(name, config, batch, args.dropout)[1]
        for _ in range(args.warmup):  # compiles (TensorFlow's graph, jax.jit)
            steppers[name]()
    times = {name: [] for name in steppers}
    for _ in range(args.rounds):
        for name, step in steppers.items():
            times[name].append(time_steps(step, args.steps))
    median = {name: statistics.median(values) for name, values in times.items()}
    backend = keras.backend.backend()
    lines = [
        f"bert-{args.size} MLM train step on {backend} ({args.precision}, batch {args.batch}, "
        f"length {args.length}, {args.predictions} predictions, dropout {args.dropout}; "
        f"{args.rounds} interleaved rounds of {args.steps} steps, medians; "
        f"keras {keras.__version__}, {_machine()}):",
        "",
        "| backend | keras_ctx ms/step | keras-hub ms/step | keras-hub / keras_ctx |",
        "| --- | ---: | ---: | ---: |",
        f"| {backend} | {median['keras_ctx']:,.0f} | {median['keras_hub']:,.0f} | "
        f"{median['keras_hub'] / median['keras_ctx']:.2f}x |",
    ]
    print("\n".join(lines))
    if args.record:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("\n" + "\n".join(lines) + "\n")
    return median


def _machine():
    import platform

    return f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}"


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
