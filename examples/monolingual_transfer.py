"""Monolingual transfer (Artetxe et al. 2020) in miniature: a BERT for L1 learns to read L2.

    python examples/monolingual_transfer.py [--steps 600]
    python examples/monolingual_transfer.py --fast     # a smoke run in seconds

1. Pretrain a small BERT on L1 (MLM).
2. L2 has its own vocabulary (the same grammar, words permuted): a copy of
   the backbone with fresh token embeddings (`resize_vocabulary`), body frozen,
   learns only L2's embeddings by MLM on L2 (`learn_token_embeddings`).
3. Fine-tune the L1 model on L1 labels with its embeddings frozen
   (`freeze_token_embeddings`).
4. Swap L2's embeddings in (`swap_token_embeddings`): zero-shot on L2.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data import synthetic_languages as syn  # noqa: E402
from keras_ctx.models import BertBackbone  # noqa: E402
from keras_ctx.pretraining import MaskedLMPretrainer  # noqa: E402
from keras_ctx.tasks import monolingual_transfer as mono  # noqa: E402
from keras_ctx.tasks.heads import SequenceClassifier  # noqa: E402


def fit_mlm(pretrainer, ids, steps, learning_rate):
    pretrainer.compile(optimizer=keras.optimizers.Adam(learning_rate), jit_compile=True)
    data = syn.mlm_batches(syn.classification_inputs(ids), syn.vocabulary_size(1))
    pretrainer.fit(data, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    args = scripts.parse_args(parser, argv, fast="2 steps, 1 epoch, 64 sentences")
    if args.fast:
        args.steps = 2
    examples = 64 if args.fast else 2048  # sentences per stage
    keras.utils.set_random_seed(0)
    permutation = np.random.default_rng(0).permutation(syn.WORDS)
    l1 = lambda words: syn.to_ids(words, 0)  # noqa: E731
    l2 = lambda words: syn.to_ids(words, permutation=permutation)  # noqa: E731

    backbone = BertBackbone(vocabulary_size=syn.vocabulary_size(1), num_layers=2, num_heads=2,
                            hidden_size=32, intermediate_size=128, max_sequence_length=24,
                            dropout=0.0)
    fit_mlm(MaskedLMPretrainer(backbone), l1(syn.sentences(examples, seed=0)[0]), args.steps, 2e-3)

    l2_backbone = mono.resize_vocabulary(backbone, syn.vocabulary_size(1), seed=1)
    pretrainer = MaskedLMPretrainer(l2_backbone)
    count = mono.learn_token_embeddings(pretrainer)
    fit_mlm(pretrainer, l2(syn.sentences(examples, seed=1)[0]), args.steps, 5e-3)
    print(f"step 2 trains {count} of {pretrainer.count_params()} parameters")  # now built

    classifier = SequenceClassifier(backbone, num_classes=2, dropout=0.0)
    count = mono.freeze_token_embeddings(classifier, backbone)
    print(f"step 3 trains {count} of {classifier.count_params()} parameters")
    classifier.compile(keras.optimizers.Adam(1e-3),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=True)
    words, labels = syn.sentences(min(examples, 1024), seed=2)
    classifier.fit(syn.classification_inputs(l1(words)), labels, batch_size=32,
                   epochs=1 if args.fast else 6, verbose=2)
    test, test_labels = syn.sentences(64 if args.fast else 400, seed=3)
    _, accuracy = classifier.evaluate(syn.classification_inputs(l1(test)), test_labels, verbose=0)
    print(f"L1 accuracy: {accuracy:.3f}")
    mono.swap_token_embeddings(backbone, l2_backbone.token_embedding.embeddings)
    _, accuracy = classifier.evaluate(syn.classification_inputs(l2(test)), test_labels, verbose=0)
    print(f"L2 accuracy with L2's embeddings swapped in (zero-shot): {accuracy:.3f}")


if __name__ == "__main__":
    main()
