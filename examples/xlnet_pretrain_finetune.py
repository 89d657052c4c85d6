"""XLNet in miniature: permutation-LM pretraining with memory, then fine-tuning.

Runs on CPU in well under a minute:

    python examples/xlnet_pretrain_finetune.py
    python examples/xlnet_pretrain_finetune.py --fast     # a smoke run in seconds

1. Text: the built-in corpus (Python's own docstrings), WordPiece-tokenized
   with keras_hub (vocabulary computed here).
2. Pretraining: `text_stream` deals the documents into 8 parallel streams so
   that consecutive batches continue one another; `permutation_masks` samples
   a factorization order per sequence (span-based) and predicts its last 1/6;
   `XLNetPretrainer` runs both streams under XLA and carries the memory.
3. Fine-tuning: the same backbone, content stream only (the standard three
   inputs, XLA), classifies whether a sequence is real text or the same
   tokens shuffled.
"""

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data import synthetic_text  # noqa: E402
from keras_ctx.data.corpora import documents, text_lines  # noqa: E402
from keras_ctx.data.permutation import permutation_masks  # noqa: E402
from keras_ctx.data.xlnet_stream import text_stream  # noqa: E402
from keras_ctx.models import XLNetBackbone  # noqa: E402
from keras_ctx.pretraining import XLNetPretrainer  # noqa: E402

SEQUENCE_LENGTH, BATCH_SIZE, MEM_LEN = 48, 8, 24


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = scripts.parse_args(parser, argv, fast="60 made-up documents, 2 batches")
    if not args.fast:
        return run("builtin", batches=(40, 30), epochs=(2, 3))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = synthetic_text.write_corpus(os.path.join(tmp, "corpus.txt"), 60)
        return run(corpus, batches=(2, 2), epochs=(1, 1))


def run(corpus, batches, epochs):
    """Pretrains on `batches[0]` batches for `epochs[0]` epochs, then fine-tunes likewise."""
    keras.utils.set_random_seed(0)
    lines = text_lines(corpus).take(1500)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        lines, vocabulary_size=1000, lowercase=True
    )
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary, lowercase=True)
    separator = tokenizer.token_to_id("[SEP]")

    # Documents as 1-D token id tensors: all their sentences, tokenized.
    docs = documents(corpus).take(200).map(
        lambda sentences: tokenizer(sentences).flat_values
    ).cache()  # text_stream reads it once per stream

    # --- Pretraining: PLM with two streams and Transformer-XL memory ---
    plm_data = permutation_masks(
        text_stream(docs, SEQUENCE_LENGTH, BATCH_SIZE, separator_id=separator),
        span_based=True, seed=0,
    ).take(batches[0]).cache()
    plm_data = scripts.counted(plm_data)  # one pass fills the cache
    backbone = XLNetBackbone(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_heads=2,
        hidden_size=64, intermediate_size=128, mem_len=MEM_LEN,
    )
    pretrainer = XLNetPretrainer(backbone, batch_size=BATCH_SIZE)
    pretrainer.compile(keras.optimizers.Adam(2e-3), jit_compile=True)
    history = pretrainer.fit(plm_data, epochs=epochs[0], shuffle=False, verbose=2)
    print("PLM accuracy per epoch:", [round(a, 3) for a in history.history["plm_accuracy"]],
          f"(chance {1 / tokenizer.vocabulary_size():.4f})")

    # --- Fine-tuning: content stream only, the standard three inputs ---
    def example(batch):
        ids = batch["token_ids"]
        shuffled = tf.map_fn(tf.random.shuffle, ids)
        token_ids = tf.concat([ids, shuffled], 0)
        labels = tf.concat([tf.ones(BATCH_SIZE, "int32"), tf.zeros(BATCH_SIZE, "int32")], 0)
        inputs = {"token_ids": token_ids, "padding_mask": tf.ones_like(token_ids),
                  "segment_ids": tf.zeros_like(token_ids)}
        return inputs, labels

    finetune_data = text_stream(docs, SEQUENCE_LENGTH, BATCH_SIZE).map(example)
    finetune_data = scripts.counted(finetune_data.take(batches[1]).cache())
    # The query stream's mask embedding has no part in fine-tuning (content stream only).
    backbone.mask_embedding.trainable = False
    # XLNet summarizes a sequence by its last token.
    summary = backbone(backbone.input)["sequence_output"][:, -1]
    classifier = keras.Model(backbone.input, keras.layers.Dense(2)(summary))
    classifier.compile(
        keras.optimizers.Adam(1e-3), jit_compile=True,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = classifier.fit(finetune_data, epochs=epochs[1], shuffle=False, verbose=2)
    print("Fine-tuning accuracy per epoch:",
          [round(a, 3) for a in history.history["accuracy"]])
    print("Final accuracy (chance 0.5):", np.round(history.history["accuracy"][-1], 3))


if __name__ == "__main__":
    main()
