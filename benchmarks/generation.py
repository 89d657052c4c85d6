"""Greedy generation tokens/s per weight precision: keras_ctx vs keras-hub, and the
machine's memory-bandwidth bound.

    python -m benchmarks.generation [--layers 12 --hidden 768 --heads 12 --vocab 50257]
        [--prompt 8 --max-length 40] [--batches 1 16]
        [--precisions float32 bfloat16 int8 int4 float8] [--interleave-precisions]
        [--compare keras-hub|none]
        [--repeats 3] [--ours-xla auto on off] [--record]

Both sides are GPT-2 of the same shape with random weights (same shape, same
bytes; the tokens differ), generating greedily from the same prompts to
`--max-length` with no stop token: keras_ctx's `generation.generate` on
`generation.for_decoding(backbone, precision)`, the whole loop compiled with
XLA (`--ours-xla on`, row "keras_ctx XLA"), as a plain TF graph
(`off`, "keras_ctx no-XLA") and/or as `generate` chooses by default (`auto`:
`generation.resolve_jit_compile`); keras-hub's `GPT2CausalLM.generate` (preprocessor None,
`compile(sampler="greedy")`) on a `GPT2Backbone(dtype="bfloat16")` for bfloat16
and after `quantize("int8")` for int8. keras-hub's generate is a
`tf.function(jit_compile=model.jit_compile)`, and Keras' `compile(jit_compile=
"auto")` turns XLA off on a machine without a GPU: on CPU its loop is a plain
TF graph (the notes print the value it ran with). The timed calls include the prompt's
prefill and the copy of the output to numpy; compilation is excluded (one
warm-up call). Per precision and batch the two implementations alternate,
`--repeats` times; medians.

The bound: at batch <= 16 each decoding step reads every weight once (the KV
cache and activations are small next to them), so tokens/s <= batch x
bandwidth / bytes of weights. The bandwidth is measured in the same run,
before and between the timed calls: a numpy memcpy (read + write bytes / s,
one thread) and a TensorFlow reduce_sum (bytes read / s, all threads) of a
`--bandwidth-mb` buffer; the best of all is used.
Bytes of weights: every variable of the model as decoded (int8 kernels and
embeddings with their float32 scales).
"""

import argparse
import time
import warnings

import numpy as np

from benchmarks import common


def bandwidth(megabytes=256, repeats=5):
    """{method: bytes/s}: numpy memcpy (read + write) and a TF reduce_sum (read)."""
    import tensorflow as tf

    source = np.ones(megabytes * 2**20 // 4, np.float32)
    target = np.empty_like(source)
    copies = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        copies.append(2 * source.nbytes / (time.perf_counter() - start))
    tensor = tf.constant(source)
    total = tf.function(tf.reduce_sum)
    total(tensor).numpy()
    reads = []
    for _ in range(repeats):
        start = time.perf_counter()
        total(tensor).numpy()
        reads.append(source.nbytes / (time.perf_counter() - start))
    return {"memcpy": float(np.median(copies)), "read": float(np.median(reads))}


def weight_bytes(model):
    return sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.weights)


# --ours-xla: (row label, generate's jit_compile)
OURS_XLA = {"on": ("XLA", True), "off": ("no-XLA", False), "auto": ("auto", "auto")}


def build_ours(args, precision, jit_compile="auto"):
    import keras

    from keras_ctx import generation
    from keras_ctx.models.gpt.backbone import GPTBackbone

    keras.utils.set_random_seed(0)
    backbone = GPTBackbone(vocabulary_size=args.vocab, num_layers=args.layers,
                           num_heads=args.heads, hidden_size=args.hidden,
                           intermediate_size=4 * args.hidden,
                           max_sequence_length=args.max_length, dropout=0.0)
    model = generation.for_decoding(backbone, precision)

    def run(prompt):
        out = generation.generate(model, prompt, max_length=args.max_length,
                                  jit_compile=jit_compile)
        return out["token_ids"].numpy()

    return model, run


def build_keras_hub(args, precision):
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=args.vocab, num_layers=args.layers, num_heads=args.heads,
        hidden_dim=args.hidden, intermediate_dim=4 * args.hidden,
        max_sequence_length=args.max_length, dropout=0.0,
        dtype="bfloat16" if precision == "bfloat16" else None)
    model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    if precision in ("int8", "int4", "float8"):
        with warnings.catch_warnings():  # one per layer it leaves as is
            warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
            model.quantize(precision)
    model.compile(sampler="greedy")
    pad = args.max_length - args.prompt

    def run(prompt):
        inputs = {"token_ids": np.pad(prompt, ((0, 0), (0, pad))),
                  "padding_mask": np.pad(np.ones_like(prompt, bool), ((0, 0), (0, pad)))}
        return np.asarray(model.generate(inputs, stop_token_ids=None)["token_ids"])

    return model, run


def _timed(args, runs, rng, generated, measure_bandwidth):
    """Rows of tokens/s for `runs` {(precision, implementation): (model, run)}, alternating."""
    rows = []
    for batch in args.batches:
        prompt = rng.integers(1, args.vocab, (batch, args.prompt)).astype("int32")
        for _, run in runs.values():
            run(prompt)  # compile
        times = {key: [] for key in runs}
        for _ in range(args.repeats):
            for key, (_, run) in runs.items():  # alternate
                start = time.perf_counter()
                run(prompt)
                times[key].append(time.perf_counter() - start)
            measure_bandwidth()
        speeds = {key: batch * generated / float(np.median(t)) for key, t in times.items()}
        for (precision, name), (model, _) in runs.items():
            hub = speeds.get((precision, "keras-hub"))
            ratio = f"{speeds[(precision, name)] / hub:.2f}x" if hub else "-"
            rows.append([precision, batch, name, speeds[(precision, name)],
                         weight_bytes(model), ratio])
            print(*rows[-1], flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    parser.add_argument("--max-length", type=int, default=40, help="prompt + generated")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16", "int8"],
                        choices=["float32", "bfloat16", "int8", "int4", "float8"])
    parser.add_argument("--interleave-precisions", action="store_true",
                        help="build every precision first, then alternate over all of them "
                             "in each repeat (a loaded machine's load hits every row alike)")
    parser.add_argument("--compare", default="keras-hub", choices=["keras-hub", "none"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bandwidth-mb", type=int, default=256)
    parser.add_argument("--ours-xla", nargs="+", default=["auto"], choices=sorted(OURS_XLA),
                        help="keras_ctx's loop with XLA (on), as a TF graph (off), "
                             "and/or generate's default choice (auto)")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.prompt < args.max_length:
        parser.error("--prompt must be in [1, --max-length).")

    load_start = common.load_average()
    # Measured between the timed calls too (the load changes): the best of all.
    measured = bandwidth(args.bandwidth_mb)

    def measure_bandwidth():
        for method, value in bandwidth(args.bandwidth_mb, repeats=1).items():
            measured[method] = max(measured[method], value)

    builders = {}
    for choice in args.ours_xla:  # default arguments bind each choice
        builders[f"keras_ctx {OURS_XLA[choice][0]}"] = (
            lambda args, precision, jit=OURS_XLA[choice][1]: build_ours(args, precision, jit))
    if args.compare == "keras-hub":
        builders["keras-hub"] = build_keras_hub
    generated = args.max_length - args.prompt
    rng = np.random.default_rng(0)
    rows = []
    groups = [[p] for p in args.precisions]
    if args.interleave_precisions:
        groups = [list(args.precisions)]
    for group in groups:
        runs = {(precision, name): build(args, precision) for precision in group
                for name, build in builders.items()}
        rows += _timed(args, runs, rng, generated, measure_bandwidth)
        del runs

    peak = max(measured.values())
    for row in rows:  # the bound from the best bandwidth of the whole run
        precision, batch, name, speed, size, ratio = row
        bound = batch * peak / size
        row[:] = (precision, batch, name, f"{speed:,.1f}", f"{size / 2**20:,.1f}",
                  f"{bound:,.0f}", f"{100 * speed / bound:.0f}%", ratio)
    rows = [tuple(row) for row in rows]

    title = (f"GPT-2 greedy generation, L{args.layers} H{args.hidden} A{args.heads} "
             f"V{args.vocab}, prompt {args.prompt} + {generated} generated tokens")
    notes = (f"Bandwidth measured in the same run: memcpy {measured['memcpy'] / 1e9:.1f} GB/s "
             f"(read + write), reduce_sum {measured['read'] / 1e9:.1f} GB/s (read); the "
             f"bound uses {peak / 1e9:.1f} GB/s: batch x bandwidth / bytes of weights. "
             f"Median of {args.repeats} alternating calls. keras_ctx with XLA: "
             f"{args.ours_xla}; keras-hub: Keras' jit_compile='auto' (no XLA without a GPU). "
             f"Precisions {'interleaved' if args.interleave_precisions else 'one at a time'}. "
             f"Load average (1, 5, 15 min) "
             f"at start {load_start}, at end {common.load_average()}.")
    text = common.table(["precision", "batch", "implementation", "tokens/s", "weights MiB",
                         "bound tokens/s", "of bound", "vs keras-hub"], rows) + "\n\n" + notes
    common.report("generation", title, text, args.record)
    return rows


if __name__ == "__main__":
    main()
