"""Inference latency: exported SavedModel vs the Keras model vs keras-hub's backbone.

    python -m benchmarks.inference_latency [--model bert --batches 1 32 --length 128 --record]

For each batch size, times one forward pass (no dropout) of

- `keras_ctx SavedModel`: `keras_ctx.export.export_saved_model`, reloaded
  with `tf.saved_model.load` and called through `serving_default` (what TF
  Serving runs; its outputs include every layer's hidden states), exported
  plain (XLA off) and with `jit_compile=True` (XLA on: `--xla-serving`);
- `keras_ctx Keras (tf.function)` / `(XLA)`: the backbone called in a
  `tf.function`, without and with `jit_compile`;
- `keras-hub backbone (tf.function)` / `(XLA)`: keras-hub's backbone of the
  same configuration, the same way;
- `keras_ctx ONNX Runtime`: `keras_ctx.export.export_onnx` (the same
  outputs as serving_default), run by ONNX Runtime's CPU provider with its
  default threads and graph optimizations (skipped without the `[onnx]`
  extra, or with `--no-onnx`).

The implementations alternate within each repeat and the table shows the
median latency in ms and its ratio to the Keras backbone under XLA. The default configuration is the training benchmark's
(BERT L4 H256 A4, sequence 128); `--layers/--hidden/--heads` change it.
"""

import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks import common

VOCABULARY = {"bert": 30522, "gpt2": 50257}


def build(model_name, layers, hidden, heads):
    import keras_hub

    from keras_ctx.models import BertBackbone, GPTBackbone

    V = VOCABULARY[model_name]
    if model_name == "bert":
        ours = BertBackbone(V, layers, heads, hidden, 4 * hidden)
        theirs = keras_hub.models.BertBackbone(V, layers, heads, hidden, 4 * hidden)
    else:
        ours = GPTBackbone(V, layers, heads, hidden, 4 * hidden)
        theirs = keras_hub.models.GPT2Backbone(V, layers, heads, hidden, 4 * hidden)
    return ours, theirs


def inputs_for(model, batch, length, rng):
    names = list(model.input.keys())
    data = {"token_ids": rng.integers(5, 1000, size=(batch, length)).astype("int32"),
            "padding_mask": np.ones((batch, length), "int32"),
            "segment_ids": np.zeros((batch, length), "int32")}
    return {name: data[name] for name in names}


def onnx_runtime(ours, export_dir):
    """(label, XLA, call) of the backbone exported to ONNX and run by ONNX Runtime."""
    import onnxruntime

    from keras_ctx.export import export_onnx

    path = export_onnx(ours, os.path.join(export_dir, "backbone.onnx"))
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return ("keras_ctx ONNX Runtime", None, lambda x: session.run(None, x))


def candidates(ours, theirs, export_dir, onnx=True):
    import tensorflow as tf

    from keras_ctx.export import export_saved_model

    rows = []
    if onnx:
        try:
            rows.append(onnx_runtime(ours, export_dir))
        except (ImportError, ValueError) as error:  # no [onnx] extra (ExportError)
            print(f"ONNX Runtime skipped: {error}")
    for jit in (False, True):
        path = export_saved_model(ours, os.path.join(export_dir, str(jit)), jit_compile=jit)
        serving = tf.saved_model.load(path).signatures["serving_default"]
        rows.append(("keras_ctx SavedModel serving_default", jit,
                     lambda x, s=serving: s(**{k: tf.constant(v) for k, v in x.items()})))
    for label, model in (("keras_ctx Keras", ours), ("keras-hub backbone", theirs)):
        for jit in (False, True):
            function = tf.function(lambda x, model=model: model(x, training=False),
                                   jit_compile=jit)
            rows.append((label, jit, lambda x, f=function: f(
                {k: tf.constant(v) for k, v in x.items()})))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert", choices=sorted(VOCABULARY))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="calls timed per repeat")
    parser.add_argument("--no-onnx", dest="onnx", action="store_false",
                        help="skip the ONNX export and ONNX Runtime")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)

    import tensorflow as tf

    load_start = common.load_average()
    ours, theirs = build(args.model, args.layers, args.hidden, args.heads)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as export_dir:
        impls = candidates(ours, theirs, export_dir, args.onnx)
        for batch in args.batches:
            x_ours = inputs_for(ours, batch, args.length, rng)
            x_theirs = inputs_for(theirs, batch, args.length, rng)
            times = {i: [] for i in range(len(impls))}
            for index, (label, _, call) in enumerate(impls):
                x = x_theirs if label.startswith("keras-hub") else x_ours
                for _ in range(2):  # trace / compile, warm up
                    tf.nest.map_structure(np.asarray, call(x))
            for _ in range(args.repeats):
                for index, (label, _, call) in enumerate(impls):  # alternate
                    x = x_theirs if label.startswith("keras-hub") else x_ours
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        out = call(x)
                    tf.nest.map_structure(np.asarray, out)
                    times[index].append((time.perf_counter() - start) / args.calls)
            reference = float(np.median(times[next(
                i for i, (label, jit, _) in enumerate(impls)
                if label == "keras_ctx Keras" and jit)]))
            for index, (label, jit, _) in enumerate(impls):
                median = float(np.median(times[index]))
                rows.append((label, {True: "on", False: "off", None: "-"}[jit], batch,
                             f"{median * 1e3:.2f}", f"{batch * args.length / median:,.0f}",
                             f"{median / reference:.2f}"))

    title = (f"{args.model} inference latency, L{args.layers} H{args.hidden} "
             f"A{args.heads}, sequence {args.length}, float32")
    notes = (f"Median of {args.repeats} x {args.calls} calls; {common.allocator()}; load average (1, 5, 15 min) "
             f"at start {load_start}, at end {common.load_average()}.")
    text = common.table(["implementation", "XLA", "batch", "latency ms (median)",
                         "tokens/s", "latency / keras_ctx Keras XLA"], rows) + "\n\n" + notes
    common.report("inference_latency", title, text, args.record)
    return rows


if __name__ == "__main__":
    main()
