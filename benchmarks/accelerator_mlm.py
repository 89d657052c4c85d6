"""BERT MLM training step on an accelerator: keras_ctx vs keras-hub, same backend and device.

BERT-base (L12 H768 A12, vocabulary 30,522), sequence 128, mixed_bfloat16,
AdamW, random tokens with `--predictions` masked positions per sequence (20 as
keras-hub's BertMaskedLM preset preprocessor). Both models train through their
own Keras `train_step(state, data)`, jit-compiled once; the two are timed in
turns (`--rounds` rounds of `--steps` steps each, after warm-up), each round
ended by `jax.block_until_ready`, so that both see the same device state.
`--dropout 0` (both models) lets plain attention run `keras.ops.dot_product_attention`
(cuDNN flash attention on a GPU under bf16); with dropout in training it cannot.
Reports seq/s and MFU = 3 x forward matmul FLOPs (attention included) / time /
`--peak` (989 TFLOP/s: dense bf16 of an H100 SXM or an H200), and the matrix
FLOPs each compiled step really runs (its StableHLO's dot_generals) over that
model count: below 1 where an implementation skips work (keras_ctx's last layer
runs only the masked positions' queries), above where it adds some.

Needs only keras, jax, keras-hub and keras_ctx (numpy batches, no TensorFlow):

    KERAS_BACKEND=jax python -m benchmarks.accelerator_mlm [--batch 256] [--record]

Several hosts (e.g. a TPU pod slice or GPU nodes): run the same command on every
host after `jax.distributed.initialize()` (`--distributed`); the batch is then
the global batch, split by keras.distribution.DataParallel over all devices.
"""

import argparse
import math
import os
import re
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402

BERT_BASE = dict(layers=12, hidden=768, heads=12, intermediate=3072, vocabulary=30522)
PEAK = 989e12  # dense bf16 FLOP/s of an NVIDIA H100 SXM and of an H200 (NVIDIA's data sheets)


def forward_matmul_flops(batch, length, predictions, layers, hidden, intermediate, vocabulary,
                         **_):
    """Forward matrix-product FLOPs of one BERT MLM step (2 per multiply-add).

    Per layer and token: Q, K, V, O (4 H^2) and the FFN (2 H F) products, plus
    attention's scores and context (2 T H); per masked position: the head's
    transform (H^2) and the tied vocabulary projection (H V).
    """
    tokens = batch * length
    encoder = layers * tokens * 2 * (4 * hidden * hidden + 2 * hidden * intermediate
                                     + 2 * length * hidden)
    head = batch * predictions * 2 * (hidden * hidden + hidden * vocabulary)
    return encoder + head


# A StableHLO matrix product: its contracted axes, the precisions an `algorithm` sets
# (JAX's attention asks bf16 x bf16 products of float32 cotangents), operand and result types.
_DOT = re.compile(r"stablehlo\.dot_general .*?contracting_dims = \[([\d, ]*)\] x \[[\d, ]*\]"
                  r"(?:.*?lhs_precision_type = (\w+), rhs_precision_type = (\w+))?"
                  r".*?: \(tensor<([^>]*)>, tensor<([^>]*)>\) -> tensor<([^>]*)>")


def program_matmuls(stablehlo):
    """[(FLOPs, lhs precision, rhs precision, result elements)] of every dot_general in
    a lowered program's StableHLO text: the matrix work the step really does."""
    def shape(tensor_type):
        *dims, dtype = tensor_type.split("x")
        return [int(d) for d in dims], dtype

    products = []
    for contracted, lhs_precision, rhs_precision, lhs, rhs, result in _DOT.findall(stablehlo):
        (lhs_dims, lhs_dtype), (_, rhs_dtype) = shape(lhs), shape(rhs)
        elements = math.prod(shape(result)[0])
        depth = math.prod(lhs_dims[int(axis)] for axis in contracted.split(","))
        products.append((2 * elements * depth, lhs_precision or lhs_dtype,
                         rhs_precision or rhs_dtype, elements))
    return products


def make_batch(batch, length, predictions, vocabulary, seed=0):
    """(x, y, sample_weight) numpy arrays: keras-hub BertMaskedLM's format."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocabulary, (batch, length)).astype("int32")
    positions = np.sort(np.stack([rng.choice(np.arange(1, length - 1), predictions,
                                             replace=False) for _ in range(batch)]), -1)
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids),
         "segment_ids": np.zeros_like(ids), "mask_positions": positions.astype("int32")}
    return x, np.take_along_axis(ids, positions, 1), np.ones(positions.shape, "float32")


def keras_ctx_model(config, dropout):
    from keras_ctx.models import BertBackbone
    from keras_ctx.pretraining import MaskedLMPretrainer

    backbone = BertBackbone(vocabulary_size=config["vocabulary"], num_layers=config["layers"],
                            num_heads=config["heads"], hidden_size=config["hidden"],
                            intermediate_size=config["intermediate"],
                            max_sequence_length=512, dropout=dropout)
    return MaskedLMPretrainer(backbone)  # MLM only, as BertMaskedLM


def keras_ctx_data(x, y, weights):
    return {**x, "mask_ids": y, "mask_weights": weights}


def keras_hub_model(config, dropout):
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocabulary"], num_layers=config["layers"],
        num_heads=config["heads"], hidden_dim=config["hidden"],
        intermediate_dim=config["intermediate"], max_sequence_length=512, dropout=dropout)
    return keras_hub.models.BertMaskedLM(backbone, preprocessor=None)


IMPLEMENTATIONS = ("keras_ctx", "keras_hub")


def build(name, config, batch, dropout=0.1):
    """(model, the `data` its train_step takes), compiled with AdamW, every variable built.

    Built from the batch's structure (as `fit` builds before its first step), not
    by fitting: keras-hub's `fit` turns numpy inputs into a dataset with tf.data
    or grain, which a machine with only JAX lacks.
    """
    import keras

    from keras_ctx.common import compat

    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01)
    x, y, weights = batch
    if name == "keras_ctx":
        model, data = keras_ctx_model(config, dropout), (keras_ctx_data(x, y, weights),)
    else:
        model, data = keras_hub_model(config, dropout), batch
    model.compile(optimizer=optimizer)  # keras-hub's: its own loss and weighted accuracy
    compat.resolve("symbolic_build")(model, data_batch=data)
    return model, data


class Stepper:
    """One model's compiled `train_step(state, data)`, its state and its program's matmuls."""

    def __init__(self, model, data):
        import jax

        from keras_ctx.common import compat

        self.model = model
        self.state = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in model.optimizer.variables],
            [v.value for v in model.metrics_variables])
        # As Keras' JAX fit places it: split over the devices of a keras.distribution.
        self.data = compat.resolve("jax_distribute_data")(data)
        lowered = jax.jit(model.train_step, donate_argnums=0).lower(self.state, self.data)
        self.matmuls = program_matmuls(lowered.as_text())
        self.step = lowered.compile()

    def run(self, steps):
        """Seconds for `steps` steps, the device synchronised at the end."""
        import jax

        start = time.perf_counter()
        for _ in range(steps):
            logs, self.state = self.step(self.state, self.data)
        jax.block_until_ready((logs, self.state))
        return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    for key, value in BERT_BASE.items():
        parser.add_argument(f"--{key}", type=int, default=value)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak", type=float, default=PEAK, help="FLOP/s of the device")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--dropout", type=float, default=0.1,
                        help="both backbones' dropout (0.1: Devlin et al. 2019); at 0 their "
                             "attention runs keras.ops.dot_product_attention (flash on a GPU)")
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--distributed", action="store_true",
                        help="jax.distributed.initialize() first (one process per host)")
    parser.add_argument("--record", action="store_true", help="append to benchmarks/RESULTS.md")
    parser.add_argument("--profile", metavar="DIR",
                        help="after the table, trace --profile-steps more steps of each "
                             "implementation into DIR/NAME.xplane.pb (read them with "
                             "benchmarks/profile_summary.py)")
    parser.add_argument("--profile-steps", type=int, default=2)
    args = parser.parse_args(argv)

    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit("Run with KERAS_BACKEND=jax (this benchmark times JAX steps).")
    if args.distributed:
        jax.distributed.initialize()
    if jax.device_count() > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel())
    keras.config.set_dtype_policy(args.precision)
    keras.utils.set_random_seed(0)
    config = {key: getattr(args, key) for key in BERT_BASE}
    if args.batch % jax.device_count():
        raise SystemExit(f"--batch {args.batch} does not split over {jax.device_count()} "
                         "devices: give a multiple.")
    # Each process makes its own rows of the global batch (distinct seeds).
    batch = make_batch(args.batch // jax.process_count(), args.length, args.predictions,
                       args.vocabulary, seed=jax.process_index())
    names = args.implementations.split(",")
    steppers = {name: Stepper(*build(name, config, batch, args.dropout)) for name in names}
    for stepper in steppers.values():
        stepper.run(args.warmup)
    times = {name: [] for name in names}
    for _ in range(args.rounds):  # interleaved: both see the same device state
        for name, stepper in steppers.items():
            times[name].append(stepper.run(args.steps) / args.steps)
    flops = 3 * forward_matmul_flops(args.batch, args.length, args.predictions, **config)
    device = jax.devices()[0]
    rows = []
    for name in names:
        seconds = statistics.median(times[name])
        done = sum(product[0] for product in steppers[name].matmuls)
        rows.append((name, f"{seconds * 1e3:.1f}", f"{args.batch / seconds:,.0f}",
                     f"{flops / seconds / args.peak:.1%}", f"{done / flops:.2f}"))
    header = ("implementation", "ms/step", "seq/s", f"MFU (peak {args.peak / 1e12:g} TFLOP/s)",
              "matmul FLOPs run / model's")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines)
    what = (f"BERT L{args.layers} H{args.hidden} A{args.heads}, batch {args.batch} x "
            f"{args.length}, {args.predictions} masked, {args.precision}, dropout "
            f"{args.dropout:g}, AdamW; "
            f"{jax.device_count()} x {device.device_kind} ({device.platform}); "
            f"jax {jax.__version__}, keras {keras.__version__}")
    print(what)
    print(text)
    if args.record:
        path = os.path.join(os.path.dirname(__file__), "RESULTS.md")
        with open(path, "a") as handle:
            handle.write(f"\n## accelerator_mlm ({time.strftime('%Y-%m-%d')})\n\n{what}\n\n"
                         f"{text}\n")
    if args.profile:  # after the table: a profiler that fails loses no timing
        for name, stepper in steppers.items():
            print(f"Profile of {name}: {profile(stepper, args.profile_steps, args.profile, name)}")
    return rows


def profile(stepper, steps, directory, name):
    """Traces `steps` steps of `stepper` with JAX's profiler; the trace's path.

    The profiler nests its files by date and host; the trace is moved to
    DIR/NAME.xplane.pb, where few folders lie between it and DIR.
    """
    import glob
    import shutil

    import jax

    scratch = os.path.join(directory, f".{name}-trace")
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # the device's ops, not Python's calls: a small file
    options.enable_hlo_proto = False
    with jax.profiler.trace(scratch, profiler_options=options):
        stepper.run(steps)
    (trace,) = glob.glob(os.path.join(scratch, "**", "*.xplane.pb"), recursive=True)
    target = os.path.join(directory, f"{name}.xplane.pb")
    os.replace(trace, target)
    shutil.rmtree(scratch)
    return target


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
