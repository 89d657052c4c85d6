"""mBERT-style zero-shot cross-lingual transfer in miniature: one encoder, two languages.

    python examples/mbert_zero_shot.py [--steps 800]
    python examples/mbert_zero_shot.py --fast     # a smoke run in seconds

1. Two synthetic languages (one grammar, disjoint vocabularies,
   `keras_ctx.data.synthetic_languages`), one 4x larger than the other.
2. Joint MLM pretraining of one BERT over both, languages sampled with
   exponentially smoothed probabilities q_i ~ p_i^0.7 (mBERT's S = 0.7,
   `keras_ctx.data.multilingual.sample_languages`).
3. Fine-tune a classifier on language 1's labels only; evaluate on both
   languages (zero-shot on language 2):
   `keras_ctx.tasks.cross_lingual.zero_shot_transfer`. With no shared words and a tiny model,
   expect weak transfer: mBERT's relies on scale and shared subwords.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data import multilingual as ml  # noqa: E402
from keras_ctx.data import synthetic_languages as syn  # noqa: E402
from keras_ctx.models import from_preset  # noqa: E402
from keras_ctx.pretraining import MaskedLMPretrainer  # noqa: E402
from keras_ctx.tasks.cross_lingual import zero_shot_transfer  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    args = scripts.parse_args(parser, argv, fast="2 steps, 1 epoch, 64 sentences")
    if args.fast:
        args.steps = 2
    count = 64 if args.fast else 1024
    keras.utils.set_random_seed(0)
    sizes = {"l1": 4 * count, "l2": count}
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
    pretrainer.fit(data, steps_per_epoch=args.steps, epochs=1, shuffle=False, verbose=2)

    def labelled(count, seed, language):
        words, labels = syn.sentences(count, seed=seed)
        return syn.classification_inputs(syn.to_ids(words, language)), labels

    held_out = 64 if args.fast else 400
    result = zero_shot_transfer(backbone, labelled(count, 10, 0), labelled(held_out, 11, 1),
                                num_classes=2, eval_l1=labelled(held_out, 11, 0),
                                epochs=1 if args.fast else 3, learning_rate=1e-3, dropout=0.0,
                                verbose=2)
    print(f"language 1 accuracy: {result['l1_accuracy']:.3f} (trained)")
    print(f"language 2 accuracy: {result['l2_accuracy']:.3f} (zero-shot)")


if __name__ == "__main__":
    main()
