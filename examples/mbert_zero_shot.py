"""mBERT-style zero-shot cross-lingual transfer in miniature: one encoder, two languages.

    python examples/mbert_zero_shot.py [--steps 800]

1. Two synthetic languages (one grammar, disjoint vocabularies,
   `keras_ctx.data.synthetic_languages`), one 4x larger than the other.
2. Joint MLM pretraining of one BERT over both, languages sampled with
   exponentially smoothed probabilities q_i ~ p_i^0.7 (mBERT's S = 0.7,
   `keras_ctx.data.multilingual.sample_languages`).
3. Fine-tune a classifier on language 1's labels only; evaluate on both
   languages (zero-shot on language 2). With no shared words and a tiny model,
   expect weak transfer: mBERT's relies on scale and shared subwords.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx.data import multilingual as ml  # noqa: E402
from keras_ctx.data import synthetic_languages as syn  # noqa: E402
from keras_ctx.models import from_preset  # noqa: E402
from keras_ctx.pretraining import MaskedLMPretrainer  # noqa: E402
from keras_ctx.tasks.heads import SequenceClassifier  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    sizes = {"l1": 4096, "l2": 1024}
    streams = {}
    for language, name in enumerate(sizes):
        words, _ = syn.sentences(sizes[name], seed=language)
        streams[name] = tf.data.Dataset.from_tensor_slices(
            syn.classification_inputs(syn.to_ids(words, language)))
    print("language sampling q:", ml.smoothed_probabilities(sizes, ml.MBERT_ALPHA))
    mixed = ml.sample_languages(streams, sizes, ml.MBERT_ALPHA, seed=0).batch(
        32, drop_remainder=True)
    special = tuple(syn.SPECIAL.values())
    from keras_ctx.data.masking import MLMMasker

    data = MLMMasker(syn.vocabulary_size(2), syn.SPECIAL["mask"], special).apply(mixed)
    backbone = from_preset("bert-base-multilingual-cased", vocabulary_size=syn.vocabulary_size(2),
                           num_layers=2, num_heads=2, hidden_size=64, intermediate_size=256,
                           max_sequence_length=16, dropout=0.0)
    pretrainer = MaskedLMPretrainer(backbone)
    pretrainer.compile(optimizer=keras.optimizers.Adam(2e-3), jit_compile=True)
    pretrainer.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=2)

    classifier = SequenceClassifier(backbone, num_classes=2, dropout=0.0)
    classifier.compile(keras.optimizers.Adam(1e-3),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=True)
    words, labels = syn.sentences(1024, seed=10)
    classifier.fit(syn.classification_inputs(syn.to_ids(words, 0)), labels, epochs=3,
                   batch_size=32, verbose=2)
    test, test_labels = syn.sentences(400, seed=11)
    for language in (0, 1):
        _, accuracy = classifier.evaluate(syn.classification_inputs(syn.to_ids(test, language)),
                                          test_labels, verbose=0)
        print(f"language {language + 1} accuracy: {accuracy:.3f}"
              + (" (zero-shot)" if language else " (trained)"))


if __name__ == "__main__":
    main()
