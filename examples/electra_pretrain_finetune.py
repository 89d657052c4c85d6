"""ELECTRA in miniature: replaced token detection on a text file, then fine-tune the discriminator.

Runs on CPU in under a minute:

    python examples/electra_pretrain_finetune.py
    python examples/electra_pretrain_finetune.py --text my_corpus.txt --steps 300
    python examples/electra_pretrain_finetune.py --fast     # a smoke run in seconds

1. Text: one sentence per line, blank lines between documents. Without --text
   the script writes short single-topic documents (cooking or sailing,
   `keras_ctx.data.synthetic_text`).
2. Tokenizer: WordPiece trained on that text.
3. Pretraining: packed sentences with BERT's dynamic MLM masking
   (`keras_ctx.data.pipelines.roberta_dataset`, no NSP, as ELECTRA); a
   generator of 1/4 the discriminator's hidden size shares its embeddings;
   `ElectraPretrainer` trains both in one XLA-compiled step.
4. Fine-tuning: only `pretrainer.discriminator` is kept; it classifies a
   sentence's topic with `keras_ctx.tasks.SequenceClassifier` ([CLS] vector).
"""

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data import pipelines, synthetic_text, tokenizers  # noqa: E402
from keras_ctx.data.corpora import documents, text_lines  # noqa: E402
from keras_ctx.models import ElectraBackbone, electra_generator  # noqa: E402
from keras_ctx.pretraining import ElectraPretrainer  # noqa: E402
from keras_ctx.tasks import SequenceClassifier  # noqa: E402

SEQUENCE_LENGTH, BATCH_SIZE = 64, 16


def fine_tune(backbone, tokenizer, steps, count=512):
    texts, labels = synthetic_text.labelled_sentences(count)
    ids = tokenizers.special_token_ids(tokenizer)

    def features(text, label):
        tokens = tf.cast(tokenizer(text), tf.int32)[: SEQUENCE_LENGTH - 2]
        tokens = tf.concat([[ids["cls"]], tokens, [ids["sep"]]], 0)
        pad = SEQUENCE_LENGTH - tf.shape(tokens)[0]
        x = {"token_ids": tf.pad(tokens, [[0, pad]], constant_values=ids["pad"]),
             "padding_mask": tf.pad(tf.ones_like(tokens), [[0, pad]]),
             "segment_ids": tf.zeros([SEQUENCE_LENGTH], tf.int32)}
        return {k: tf.ensure_shape(v, [SEQUENCE_LENGTH]) for k, v in x.items()}, label

    data = tf.data.Dataset.from_tensor_slices((texts, labels)).map(features)
    train = data.take(count * 3 // 4).batch(BATCH_SIZE, drop_remainder=True).cache()
    test = data.skip(count * 3 // 4).batch(BATCH_SIZE, drop_remainder=True).cache()
    classifier = SequenceClassifier(backbone, num_classes=2)  # ELECTRA: [CLS], no pooler
    classifier.compile(optimizer=keras.optimizers.Adam(1e-3),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=True)
    classifier.fit(train.repeat(), steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)
    return classifier.evaluate(test, verbose=0, return_dict=True)["accuracy"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", help="a text file (one sentence per line, blank lines "
                                       "between documents); default: one made here")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--vocabulary-size", type=int, default=200)
    parser.add_argument("--generator-fraction", type=float, default=0.25)
    args = scripts.parse_args(parser, argv, fast="40 documents, 3 steps")
    if args.fast:
        args.steps = 3
    keras.utils.set_random_seed(0)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.text
        if path is None:
            path = os.path.join(tmp, "corpus.txt")
            synthetic_text.write_corpus(path, 40 if args.fast else 300)
        tokenizer = tokenizers.train_wordpiece(text_lines(path), args.vocabulary_size)
        # ELECTRA-small's shape in miniature: E < H, so both networks project E -> H.
        discriminator = ElectraBackbone(
            vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_heads=2,
            hidden_size=64, intermediate_size=256, embedding_size=32,
            max_sequence_length=SEQUENCE_LENGTH, dropout=0.0)
        tokenizers.check_vocabulary(tokenizer, discriminator)
        generator = electra_generator(discriminator, args.generator_fraction)
        pretrainer = ElectraPretrainer(generator, discriminator)  # lambda = 50

        data = pipelines.roberta_dataset(documents(path), tokenizer, BATCH_SIZE,
                                         sequence_length=SEQUENCE_LENGTH)
        pretrainer.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=True)
        history = pretrainer.fit(data.repeat(), steps_per_epoch=args.steps // 3, epochs=3,
                                 shuffle=False, verbose=0).history
        print(f"ELECTRA pretraining ({tokenizer.vocabulary_size()} tokens, generator hidden "
              f"{generator.hidden_size}, discriminator hidden {discriminator.hidden_size}):")
        for name, values in history.items():
            print(f"  {name:24s} " + " -> ".join(f"{v:.3f}" for v in values))

        accuracy = fine_tune(pretrainer.discriminator, tokenizer, steps=2 if args.fast else 60,
                             count=64 if args.fast else 512)
        print(f"fine-tuned topic classification, held-out accuracy: {accuracy:.3f}")


if __name__ == "__main__":
    main()
