"""Zero-shot cross-lingual transfer (mBERT, Pires et al. 2019; XNLI, Conneau et al. 2018).

One multilingual encoder is fine-tuned on labelled data of one language only
(L1, English in the papers) and evaluated, unchanged, on another (L2): what
the encoder shares across languages is all that carries the task over.
mBERT's zero-shot results (Devlin et al., multilingual/README.md, XNLI
"Zero Shot") are this protocol.
"""

import keras

from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

# BERT's fine-tuning recipe (Devlin et al. 2019, Sec. A.3): batch 32,
# learning rate in {5e-5, 3e-5, 2e-5}, 2-4 epochs; dropout 0.1.
BATCH_SIZE = 32
LEARNING_RATE = 2e-5
EPOCHS = 3


def _split(name, data):
    """(x, y) numpy pair -> (x, y); a tf.data.Dataset of (x, y) batches -> (dataset, None)."""
    if isinstance(data, tf.data.Dataset):
        return data, None
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    raise ValueError(f"`{name}` must be an (inputs, labels) pair or a tf.data.Dataset of "
                     f"(inputs, labels) batches, got {type(data).__name__}.")


def zero_shot_transfer(backbone, train_l1, eval_l2, num_classes, eval_l1=None,
                       epochs=EPOCHS, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE,
                       dropout=0.1, pooling="auto", optimizer=None, jit_compile=True,
                       verbose=0):
    """Fine-tunes a classifier on language 1 only and evaluates it on language 2.

    Args:
        backbone: a multilingual keras_ctx backbone (e.g. mBERT); it is
            fine-tuned in place.
        train_l1: L1 training data: (inputs dict, labels) or a tf.data.Dataset
            of (inputs, labels) batches.
        eval_l2: L2 evaluation data, same forms; never trained on (zero-shot).
        num_classes: number of labels.
        eval_l1: optional held-out L1 data for `l1_accuracy`; without it,
            `l1_accuracy` is measured on `train_l1`.
        epochs, batch_size, learning_rate, dropout: BERT's fine-tuning
            defaults (batch_size is ignored for datasets).
        pooling: `SequenceClassifier`'s pooling ("auto": the family's).
        optimizer: default AdamW(learning_rate, weight_decay=0.01) as BERT.

    Returns:
        {"l1_accuracy", "l2_accuracy"} floats, and "classifier": the
        fine-tuned `SequenceClassifier`.

    Example:
    >>> result = zero_shot_transfer(mbert, (en_inputs, en_labels), (de_inputs, de_labels), 3)
    >>> result["l2_accuracy"]
    """
    from keras_ctx.tasks.heads import SequenceClassifier

    validation.positive_int("epochs", epochs)
    validation.positive_int("batch_size", batch_size)
    validation.positive_number("learning_rate", learning_rate)
    train_x, train_y = _split("train_l1", train_l1)
    l2_x, l2_y = _split("eval_l2", eval_l2)
    l1_x, l1_y = _split("eval_l1", eval_l1) if eval_l1 is not None else (train_x, train_y)
    classifier = SequenceClassifier(backbone, num_classes=num_classes, pooling=pooling,
                                    dropout=dropout)
    classifier.compile(
        optimizer or keras.optimizers.AdamW(learning_rate, weight_decay=0.01),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile)
    batching = {} if train_y is None else {"batch_size": batch_size, "shuffle": True}
    classifier.fit(train_x, train_y, epochs=epochs, verbose=verbose, **batching)

    def accuracy(x, y):
        batching = {} if y is None else {"batch_size": batch_size}
        result = classifier.evaluate(x, y, verbose=0, return_dict=True, **batching)
        return float(result["accuracy"])

    return {"l1_accuracy": accuracy(l1_x, l1_y), "l2_accuracy": accuracy(l2_x, l2_y),
            "classifier": classifier}


__all__ = ["zero_shot_transfer"]
