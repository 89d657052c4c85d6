"""keras_ctx and keras-hub with XLA and without on a CPU: bert-mini MLM steps on TensorFlow.

Steppers in one process, timed in turns (`--rounds` rounds of `--steps` steps after
`--warmup`), medians: each library on the default path (no XLA on a CPU: Keras' "auto"
and our `--xla auto`) and under XLA (`jit_compile=True`). Until issue 51 keras_ctx's
layers had XLA:CPU rewrites; this script at commit 3061970 timed them too (a third
keras_ctx stepper traced inside `compiled_for("GPU")`, which turned them off), and
benchmarks/RESULTS.md ("XLA:CPU rewrites") has both tables.

    python -m benchmarks.xla_cpu_rewrites [--steps 5 --rounds 3]
"""

import argparse
import os
import statistics
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"

from benchmarks.accelerator_mlm import (keras_ctx_data, keras_ctx_model,  # noqa: E402
                                        keras_hub_model, make_batch)
from benchmarks.backend_mlm import SIZES, _machine, time_steps  # noqa: E402

VARIANTS = (  # (name, library, jit_compile)
    ("keras_ctx, no XLA (default)", "keras_ctx", False),
    ("keras_ctx, XLA", "keras_ctx", True),
    ("keras-hub, no XLA (default)", "keras_hub", False),
    ("keras-hub, XLA", "keras_hub", True),
)


def stepper(library, jit_compile, config, batch, dropout):
    import keras

    x, y, weights = batch
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01)
    if library == "keras_ctx":
        model = keras_ctx_model(config, dropout)
        data = keras_ctx_data(x, y, weights)
        arguments = (data,)
    else:
        model = keras_hub_model(config, dropout)
        arguments = (x, y, weights)
    model.compile(optimizer=optimizer, jit_compile=jit_compile)

    def step():
        return model.train_on_batch(*arguments, return_dict=True)["loss"]

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="mini")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import keras

    config = SIZES[args.size]
    batch = make_batch(args.batch, args.length, 20, config["vocabulary"])
    steppers = {}
    for name, library, jit_compile in VARIANTS:
        keras.utils.set_random_seed(0)
        steppers[name] = stepper(library, jit_compile, config, batch, 0.1)
        for _ in range(args.warmup):
            steppers[name]()
    times = {name: [] for name in steppers}
    for _ in range(args.rounds):
        for name, step in steppers.items():
            times[name].append(time_steps(step, args.steps))
    lines = [f"bert-{args.size} MLM train step on TensorFlow (batch {args.batch}, length "
             f"{args.length}, 20 predictions, dropout 0.1; {args.rounds} interleaved rounds of "
             f"{args.steps} steps, medians; keras {keras.__version__}, {_machine()}):", "",
             "| variant | ms/step | rounds |", "| --- | ---: | --- |"]
    for name, values in times.items():
        rounds = ", ".join(f"{v:,.0f}" for v in values)
        lines.append(f"| {name} | {statistics.median(values):,.0f} | {rounds} |")
    print("\n".join(lines))
    return times


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
