"""Train a tiny GPT-2 on the built-in corpus (bytes as tokens), then sample from it.

    python examples/gpt2_generate.py                 # ~1 min on a CPU
    python examples/gpt2_generate.py --benchmark     # tokens/s vs keras-hub's GPT2CausalLM
    python examples/gpt2_generate.py --benchmark --preset gpt2 --batch 8 --length 256
    python examples/gpt2_generate.py --fast          # a smoke run in seconds

Generation runs as one XLA-compiled loop with a static key/value cache; the
same call does greedy, top-k, top-p and beam search.
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import generation, scripts  # noqa: E402
from keras_ctx.data import synthetic_text  # noqa: E402
from keras_ctx.data.corpora import text_lines  # noqa: E402
from keras_ctx.models import GPTBackbone  # noqa: E402
from keras_ctx.pretraining import CausalLMPretrainer  # noqa: E402

LENGTH = 64
END = 10  # "\n" ends a generated line


def train(steps, corpus="builtin"):
    tokenizer = keras_hub.tokenizers.ByteTokenizer(lowercase=False)
    lines = text_lines(corpus).take(6000).map(lambda s: tf.strings.join([s, "\n"]))
    tokens = lines.map(tokenizer).unbatch().batch(LENGTH, drop_remainder=True)
    data = tokens.map(lambda ids: {"token_ids": ids, "padding_mask": tf.ones_like(ids)})
    data = data.shuffle(2048, seed=0).batch(32, drop_remainder=True).repeat().prefetch(2)
    backbone = GPTBackbone(vocabulary_size=256, num_layers=2, num_heads=4, hidden_size=128,
                           intermediate_size=512, max_sequence_length=LENGTH * 2, dropout=0.0)
    model = CausalLMPretrainer(backbone)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=True)
    model.fit(data, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=2)
    return model, tokenizer


def sample(model, tokenizer, max_length=LENGTH):
    prompts = ["Return the ", "If the file "]
    encoded = [np.asarray(tokenizer(p)) for p in prompts]
    width = max(len(e) for e in encoded)
    ids = np.zeros((len(prompts), width), "int32")
    mask = np.zeros_like(ids, dtype=bool)
    for i, e in enumerate(encoded):
        ids[i, :len(e)], mask[i, :len(e)] = e, True
    for sampler in ["greedy", generation.TopKSampler(k=10), generation.TopPSampler(p=0.9),
                    generation.BeamSampler(num_beams=4)]:
        out = model.generate(ids, mask, max_length=max_length, sampler=sampler,
                             end_token_id=END)
        name = sampler if isinstance(sampler, str) else type(sampler).__name__
        for row, row_mask in zip(out["token_ids"].numpy(), out["padding_mask"].numpy()):
            print(f"{name:>12}: {tokenizer.detokenize(row[row_mask])!r}")


def benchmark(preset, batch, length, prompt_length, repeats):
    """Greedy tokens/s of keras_ctx vs keras-hub's GPT2CausalLM, same size, random weights."""
    from keras_ctx.models.gpt.backbone import GPT_PRESETS

    if preset == "tiny":
        config = dict(vocabulary_size=50257, num_layers=2, num_heads=4, hidden_size=256,
                      intermediate_size=1024, max_sequence_length=1024)
    else:
        config = dict(GPT_PRESETS[preset].config)
    ours = GPTBackbone(**config, dropout=0.0)
    hub_backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=config["vocabulary_size"], num_layers=config["num_layers"],
        num_heads=config["num_heads"], hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"], dropout=0.0,
        max_sequence_length=config["max_sequence_length"])
    hub = keras_hub.models.GPT2CausalLM(backbone=hub_backbone, preprocessor=None)
    hub.compile(sampler="greedy", jit_compile=True)
    rng = np.random.default_rng(0)
    ids = np.zeros((batch, length), "int32")
    ids[:, :prompt_length] = rng.integers(1, 1000, size=(batch, prompt_length))
    mask = np.zeros_like(ids, dtype=bool)
    mask[:, :prompt_length] = True
    new_tokens = batch * (length - prompt_length)

    def ours_run():
        return generation.generate(ours, ids, mask, max_length=length)["token_ids"].numpy()

    def hub_run():
        return hub.generate({"token_ids": ids, "padding_mask": mask},
                            stop_token_ids=None)["token_ids"]

    runs = (("keras_ctx generate (XLA, cache)", ours_run),
            ("keras-hub GPT2CausalLM.generate (jit_compile=True)", hub_run))
    compile_s, times = {}, {name: [] for name, _ in runs}
    for name, run in runs:
        start = time.perf_counter()
        run()  # compile
        compile_s[name] = time.perf_counter() - start
    for _ in range(repeats):  # alternate, so that load changes hit both alike
        for name, run in runs:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    rows = []
    for name, _ in runs:
        median = float(np.median(times[name]))
        rows.append((name, f"{compile_s[name]:.1f}", f"{median * 1000:.0f}",
                     f"{new_tokens / median:,.0f}"))
    print(f"\n{preset}: batch {batch}, {prompt_length} prompt + {length - prompt_length} "
          f"generated tokens, greedy; devices: "
          f"{[d.name for d in tf.config.list_physical_devices('GPU')] or 'CPU'}")
    print("| implementation | first call (s) | median (ms) | new tokens/s |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="training steps")
    parser.add_argument("--benchmark", action="store_true")
    parser.add_argument("--preset", default="tiny", help="tiny, gpt2, gpt2-medium, ...")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = scripts.parse_args(parser, argv, fast="40 made-up documents, 2 steps, 16-byte samples")
    if args.benchmark:
        benchmark(args.preset, args.batch, args.length, args.prompt_length, args.repeats)
        return
    keras.utils.set_random_seed(0)
    if not args.fast:
        sample(*train(args.steps))
        return
    with tempfile.TemporaryDirectory() as tmp:
        corpus = synthetic_text.write_corpus(os.path.join(tmp, "corpus.txt"), 40)
        model, tokenizer = train(2, corpus)
    sample(model, tokenizer, max_length=16)


if __name__ == "__main__":
    main()
