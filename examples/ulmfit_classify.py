"""ULMFiT in miniature: LM fine-tuning on target text, then a classifier from 24 labels.

Runs on CPU in a few minutes:

    python examples/ulmfit_classify.py
    python examples/ulmfit_classify.py --fast     # a smoke run in seconds

Documents have a topic (the class) that shows only in which words co-occur:
half of each document's words are fillers shared by all topics, half come
from the topic's own 100 words. 24 labelled documents mention few of those.
An AWD-LSTM language model trains on 3,000 unlabelled documents (stage 1,
here on the same text for want of a general corpus; stage 2 with
discriminative learning rates and STLR); stage 3 trains ULMFiT's
concat-pooling classifier with gradual unfreezing. The baseline trains the
same classifier from scratch.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.models import AwdLstmBackbone  # noqa: E402
from keras_ctx.tasks.ulmfit import (  # noqa: E402
    fine_tune_classifier,
    fine_tune_language_model,
    pretrain_language_model,
)

VOCABULARY, LENGTH = 402, 12
rng = np.random.default_rng(0)
shuffled = rng.permutation(np.arange(2, VOCABULARY))
FILLERS, TOPIC_WORDS = shuffled[:200], (shuffled[200:300], shuffled[300:])


def documents(count):
    topic = rng.integers(0, 2, count)
    from_topic = rng.random((count, LENGTH)) < 0.5
    words = np.stack([rng.choice(TOPIC_WORDS[k], LENGTH) for k in topic])
    ids = np.where(from_topic, words, rng.choice(FILLERS, (count, LENGTH))).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}, topic.astype("int32")


def backbone():
    # ULMFiT's dropouts halved for a model this small (fastai's drop_mult=0.5).
    return AwdLstmBackbone(VOCABULARY, embedding_size=32, hidden_size=64, num_layers=2,
                           embedding_dropout=0.025, input_dropout=0.2, hidden_dropout=0.15,
                           weight_dropout=0.25, output_dropout=0.2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = scripts.parse_args(parser, argv, fast="320 documents, 10-12 steps a stage")
    fast = args.fast
    keras.utils.set_random_seed(0)
    # Fast: still 10+ steps a stage, as STLR's 10% warm-up needs a whole step.
    text, _ = documents(320 if fast else 3000)
    labelled = tf.data.Dataset.from_tensor_slices(documents(24)).shuffle(24).batch(8)
    test_x, test_y = documents(64 if fast else 1000)

    def accuracy(classifier):
        return (classifier.predict(test_x, verbose=0).argmax(-1) == test_y).mean()

    scratch, _ = fine_tune_classifier(backbone(), labelled, 2, epochs=4 if fast else 36,
                                      gradual_unfreezing=False, verbose=0)
    print(f"classifier from scratch:             accuracy {accuracy(scratch):.3f}")
    text = tf.data.Dataset.from_tensor_slices(text).shuffle(3000).batch(32, drop_remainder=True)
    # Stage 1 would use a general corpus; this toy has none, so it reads the same text.
    lm = pretrain_language_model(backbone(), text, epochs=1 if fast else 4, learning_rate=3e-3,
                                 verbose=2)
    lm = fine_tune_language_model(lm, text, epochs=1, verbose=2)
    classifier, _ = fine_tune_classifier(lm.backbone, labelled, 2, epochs=4 if fast else 12,
                                         verbose=0)
    print(f"ULMFiT (target LM, gradual unfreezing): accuracy {accuracy(classifier):.3f}")


if __name__ == "__main__":
    main()
