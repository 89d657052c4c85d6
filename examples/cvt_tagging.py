"""Cross-view training in miniature: a tagger from 16 tagged and 2,000 untagged sentences.

Runs on CPU in a few minutes:

    python examples/cvt_tagging.py
    python examples/cvt_tagging.py --fast     # a smoke run in seconds

The language: every word has a class, sentences walk through the classes
(mostly to the next one, sometimes staying), and a word's tag is its class.
With 16 tagged sentences most words are never seen tagged. `CrossViewTrainer`
alternates a tagged minibatch (the primary module learns the tags) and an
untagged one (the forward, backward, future and past modules learn to agree
with the primary module's predictions), against the same model trained on
the tagged minibatches only.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.models import CvtEncoder  # noqa: E402
from keras_ctx.data.cvt import cvt_dataset  # noqa: E402
from keras_ctx.pretraining import CrossViewTrainer  # noqa: E402
from keras_ctx.pretraining.cvt import UNLABELLED  # noqa: E402

WORDS, CLASSES, LENGTH, CHARACTERS = 120, 4, 10, 6
rng = np.random.default_rng(0)
word_class = rng.integers(0, CLASSES, WORDS)
spelling = rng.integers(1, 262, (WORDS, CHARACTERS)).astype("int32")  # says nothing of class
spelling[0] = 0


def tagged_sentences(count):
    tags = np.zeros((count, LENGTH), "int32")
    tags[:, 0] = rng.integers(0, CLASSES, count)
    for t in range(1, LENGTH):
        tags[:, t] = (tags[:, t - 1] + (rng.random(count) < 0.7)) % CLASSES
    choices = [np.flatnonzero(word_class[1:] == c) + 1 for c in range(CLASSES)]
    ids = np.vectorize(lambda c: rng.choice(choices[c]))(tags).astype("int32")
    inputs = {"token_ids": ids, "character_ids": spelling[ids],
              "padding_mask": np.ones_like(ids)}
    return inputs, tags


def train(use_untagged, tagged, untagged, steps=300):
    keras.utils.set_random_seed(0)
    encoder = CvtEncoder(WORDS, embedding_size=16, first_layer_size=32, second_layer_size=16,
                         filters=[[2, 8]], character_embedding_size=8,
                         max_characters_per_token=CHARACTERS, lstm_implementation="loop")
    trainer = CrossViewTrainer(encoder, tasks=CLASSES, hidden_size=32)
    if not use_untagged:  # the same tagged updates, nothing else
        trainer.step_batches = lambda batch: [
            b for b in CrossViewTrainer.step_batches(trainer, batch) if b["branch"] != UNLABELLED]
    trainer.compile(keras.optimizers.Adam(2e-3, clipnorm=1.0))
    data = cvt_dataset(tf.data.Dataset.from_tensor_slices(tagged).shuffle(16).batch(16),
                       tf.data.Dataset.from_tensor_slices(untagged).shuffle(2000).batch(16))
    trainer.fit(data, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)
    return trainer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = scripts.parse_args(parser, argv, fast="64 untagged sentences, 2 steps")
    tagged = tagged_sentences(16)
    untagged, _ = tagged_sentences(64 if args.fast else 2000)
    test_inputs, test_tags = tagged_sentences(500)
    for name, use in (("tagged data only", False), ("cross-view training", True)):
        trainer = train(use, tagged, untagged, steps=2 if args.fast else 300)
        predicted = keras.ops.convert_to_numpy(trainer(test_inputs)["tags"]).argmax(-1)
        print(f"{name:22s} token accuracy {(predicted == test_tags).mean():.3f}")


if __name__ == "__main__":
    main()
