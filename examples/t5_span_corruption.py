"""T5 span corruption on the built-in corpus with a tiny T5 (bytes as tokens), < 1 min on CPU.

    python examples/t5_span_corruption.py
    python examples/t5_span_corruption.py --fast     # a smoke run in seconds

Each 64-byte chunk loses 15% of its tokens in spans of mean length 3
(Raffel et al., 2020); the encoder sees sentinels where the spans were, the
decoder writes the spans back after the same sentinels. Then the model fills
the spans of a held-out chunk, and the same pretrainer runs text-to-text with
a task prefix.
"""

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data import noise, synthetic_text  # noqa: E402
from keras_ctx.data.corpora import text_lines  # noqa: E402
from keras_ctx.models import T5Backbone  # noqa: E402
from keras_ctx.pretraining import Seq2SeqPretrainer  # noqa: E402
from keras_ctx.data.task_inputs import add_task_prefix  # noqa: E402

LENGTH = 64
VOCAB = 256 + 16  # bytes, then 16 sentinels counting down from 271
FIRST_SENTINEL, EOS, START = VOCAB - 1, 0, 0  # byte 0 never occurs in text: pad/eos/start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    args = scripts.parse_args(parser, argv, fast="60 made-up documents, 2 steps")
    if not args.fast:
        return run("builtin", args.steps, held_out=2500)
    with tempfile.TemporaryDirectory() as tmp:
        return run(synthetic_text.write_corpus(os.path.join(tmp, "corpus.txt"), 60), 2,
                   held_out=100)


def run(corpus, steps, held_out):
    keras.utils.set_random_seed(0)
    tf.random.set_seed(0)
    tokenizer = keras_hub.tokenizers.ByteTokenizer(lowercase=False)
    chunks = text_lines(corpus).take(3000).map(tokenizer).unbatch()
    chunks = chunks.batch(LENGTH, drop_remainder=True)
    encoder_length, decoder_length = noise.span_corruption_lengths(LENGTH)

    def corrupt(ids):
        return noise.span_corruption(ids, first_sentinel_id=FIRST_SENTINEL, eos_id=EOS)

    data = chunks.map(corrupt).map(lambda e: noise.seq2seq_features(
        e, encoder_length, decoder_length, decoder_start_id=START))
    data = data.shuffle(1024, seed=0).batch(32, drop_remainder=True).repeat()

    backbone = T5Backbone(vocabulary_size=VOCAB, num_layers=2, num_heads=4, hidden_size=128,
                          intermediate_size=512, dropout=0.0)
    model = Seq2SeqPretrainer(backbone)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=True)
    model.fit(data, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=2)

    def show(ids):
        return "".join(chr(t) if t < 256 else f"<X{FIRST_SENTINEL - t}>" for t in ids if t)

    held_out = next(iter(chunks.skip(held_out)))
    example = corrupt(held_out)
    inputs = example["inputs"].numpy()[None]
    out = model.generate(inputs, max_length=decoder_length, decoder_start_token_id=START,
                         end_token_id=EOS, sampler="greedy")
    print("original :", show(held_out.numpy()))
    print("inputs   :", show(inputs[0]))
    print("targets  :", show(example["targets"].numpy()))
    print("predicted:", show(out["token_ids"].numpy()[0, 1:]))

    # Text-to-text fine-tuning input: the task is named in the input.
    pairs = tf.data.Dataset.from_tensors({"inputs": "The house is small.",
                                          "targets": "Das Haus ist klein."})
    print(next(iter(pairs.map(add_task_prefix("translate English to German: "))))["inputs"])


if __name__ == "__main__":
    main()
