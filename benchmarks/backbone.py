"""The bare backbone in a user's model: keras_ctx vs keras-hub, training tokens/s.

    python -m benchmarks.backbone [--models bert gpt2 xlnet --xla both --record]

What a user does with a backbone of either library: a functional
`keras.Model` of the backbone's integer inputs, the backbone, a plain
`keras.layers.Dense` head on every position of its sequence output (a token
tagger, `--labels` classes) and Keras' own
`SparseCategoricalCrossentropy(from_logits=True)`, compiled with Adam and
trained by Keras' own `train_step` (what `fit` runs). No objective-level
savings (sparse last layer, custom losses) can help either side here: this
times the layers.

Both libraries' backbones have the same shape (default: bert-mini, L4 H256
A4, intermediate 1024, batch 16, sequence 128) and dropout 0.1 (keras-hub's
XLNet defaults to 0; it is given 0.1, as ours). XLNet runs without memory
(mem_len 0) and as a plain bidirectional encoder (its fine-tuning use).

Everything runs in one process: each configuration (model x library x XLA)
is built and compiled first, then single steps are timed in turns (A B, B A,
A B, ...; `--steps` of each), so drift and other jobs on the machine hit all
alike. Reported per configuration: the median ms/step and its p10-p90 spread,
the median minor page faults per step (`getrusage`), tokens/s, and
keras-hub's time over keras_ctx's per turn (the two steps timed back to back),
median and p10-p90. Whole-`fit` or multi-step timings can't separate two
libraries on a shared VM (they come out at multiples of the scheduler's
slice); per-step interleaved medians can. TensorFlow runs with the caching
allocator (benchmarks/__init__.py; TF_CPU_ALLOCATOR_USE_BFC=false for glibc's).
`--threads N` limits TensorFlow (and XLA:CPU) to N intra-op threads and one
inter-op thread: on a machine shared with other jobs, one thread each gives
steadier ratios (both libraries are time-sliced alike), at N-core speed.
"""

import argparse

import numpy as np

from benchmarks import common

VOCABULARY = {"bert": 30522, "gpt2": 50257, "xlnet": 32000}
DEFAULTS = {"layers": 4, "hidden": 256, "heads": 4, "batch": 16, "length": 128,
            "labels": 8}
DROPOUT = 0.1


def backbone(model_name, library, layers, hidden, heads, length):
    """A backbone of the given shape from `library` ("keras_ctx" or "keras-hub")."""
    V, F = VOCABULARY[model_name], 4 * hidden
    if library == "keras_ctx":
        from keras_ctx import models
        if model_name == "bert":
            return models.BertBackbone(V, layers, heads, hidden, F, dropout=DROPOUT,
                                       max_sequence_length=max(512, length))
        if model_name == "gpt2":
            return models.GPTBackbone(V, layers, heads, hidden, F, dropout=DROPOUT,
                                      max_sequence_length=max(1024, length))
        return models.XLNetBackbone(V, layers, heads, hidden, F, dropout=DROPOUT,
                                    attention_dropout=DROPOUT, mem_len=0)
    import keras_hub
    if model_name == "bert":
        return keras_hub.models.BertBackbone(V, layers, heads, hidden, F, dropout=DROPOUT,
                                             max_sequence_length=max(512, length))
    if model_name == "gpt2":
        return keras_hub.models.GPT2Backbone(V, layers, heads, hidden, F, dropout=DROPOUT,
                                             max_sequence_length=max(1024, length))
    return keras_hub.models.XLNetBackbone(V, layers, heads, hidden, F, dropout=DROPOUT)


def user_model(backbone_, labels):
    """inputs -> backbone -> Dense(labels) on every position (a user's tagger)."""
    import keras

    inputs = {name: keras.Input((None,), dtype="int32", name=name)
              for name in backbone_.input}
    outputs = backbone_(inputs)
    sequence = outputs["sequence_output"] if isinstance(outputs, dict) else outputs
    logits = keras.layers.Dense(labels, name="tagger")(sequence)
    return keras.Model(inputs, logits)


def batch_for(model, batch, length, labels, vocabulary, rng):
    data = {"token_ids": rng.integers(5, vocabulary, size=(batch, length)).astype("int32"),
            "padding_mask": np.ones((batch, length), "int32"),
            "segment_ids": (np.arange(length)[None] >= length // 2).astype("int32")
            .repeat(batch, 0)}
    x = {name: data[name] for name in model.input}
    y = rng.integers(0, labels, size=(batch, length)).astype("int32")
    return x, y


def build(model_name, library, xla, args):
    """(train function, iterator) of one configuration, traced and compiled."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = user_model(backbone(model_name, library, args.layers, args.hidden, args.heads,
                                args.length), args.labels)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=xla,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = batch_for(model, args.batch, args.length, args.labels, VOCABULARY[model_name],
                     np.random.default_rng(0))
    iterator = iter(tf.data.Dataset.from_tensors((x, y)).repeat())
    model.make_train_function()
    train = model.train_function  # what `fit` calls once per step
    for _ in range(3):  # trace + compile, warm up
        logs = train(iterator)
    loss = float(np.asarray(tf.nest.flatten(logs)[0]))
    if not np.isfinite(loss):
        raise RuntimeError(f"{model_name} {library} XLA={xla}: loss {loss}")
    return train, iterator


def one_step(train, iterator):
    """A callable that runs one training step and waits for it."""
    import tensorflow as tf

    return lambda: np.asarray(tf.nest.flatten(train(iterator))[0])


def run(args):
    if args.threads:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    xla = {"on": [True], "off": [False], "both": [True, False]}[args.xla]
    load_start = common.load_average()
    configs = [(m, lib, j) for m in args.models for j in xla
               for lib in ("keras_ctx", "keras-hub")]
    steps = {config: one_step(*build(*config, args)) for config in configs}
    samples = common.interleave(steps, args.steps)

    tokens = args.batch * args.length
    rows = []
    for model_name, library, jit in configs:
        seconds, spread, faults = common.summary(samples[(model_name, library, jit)])
        ratio = ""
        if library == "keras_ctx":
            median, ratio_spread = common.paired_ratio(
                samples[(model_name, "keras_ctx", jit)], samples[(model_name, "keras-hub", jit)])
            ratio = f"{median:.2f}x ({ratio_spread})"
        rows.append((model_name, library, "on" if jit else "off", f"{seconds * 1e3:.1f}",
                     spread, f"{faults:,.0f}", f"{tokens / seconds:,.0f}", ratio))
    title = (f"bare backbone + Dense head + Keras loss, L{args.layers} H{args.hidden} "
             f"A{args.heads}, batch {args.batch}, length {args.length}, float32"
             + (f", {args.threads} thread(s)" if args.threads else ""))
    notes = (f"Median of {args.steps} single steps per configuration, timed in turns in one "
             f"process; p10-p90 in brackets. keras_ctx / keras-hub = keras-hub's step time "
             f"over keras_ctx's, per turn. {common.allocator()}. Load average (1, 5, 15 "
             f"min) at start {load_start}, at end {common.load_average()}.")
    text = common.table(["model", "library", "XLA", "ms/step (median)", "p10-p90 ms",
                         "page faults/step", "tokens/s", "keras_ctx / keras-hub"],
                        rows) + "\n\n" + notes
    common.report("backbone", title, text, args.record)
    return rows


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=sorted(VOCABULARY), choices=sorted(VOCABULARY))
    for name, value in DEFAULTS.items():
        p.add_argument(f"--{name}", type=int, default=value)
    p.add_argument("--xla", default="both", choices=["on", "off", "both"])
    p.add_argument("--steps", type=int, default=30,
                   help="single steps timed per configuration, in turns")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads (0: TensorFlow's default, all cores)")
    p.add_argument("--record", action="store_true")
    return p


def main(argv=None):
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    main()
