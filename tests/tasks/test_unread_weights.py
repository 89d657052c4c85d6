"""A task's loss leaves the backbone weights it does not read alone, on every backend (the
suite's backend switch runs it on each).

A token classifier or span QA head reads `sequence_output`; BERT's pooler feeds only
`pooled_output`. TensorFlow's and PyTorch's gradient of the pooler is None and their
optimizer skips it; JAX's is zeros, and AdamW's decoupled weight decay would still
shrink it (w -= lr * wd * w) unless the task declares it unread (Task.reads_outputs).
"""

import keras
import numpy as np
import pytest

from keras_ctx.models import BertBackbone
from keras_ctx.tasks import SequenceClassifier, SpanQuestionAnswerer, TokenClassifier

MAKE = {"token": lambda backbone: TokenClassifier(backbone, num_labels=3),
        "span": lambda backbone: SpanQuestionAnswerer(backbone),
        "pooled": lambda backbone: SequenceClassifier(backbone, num_classes=3,
                                                      pooling="pooled")}


def _span_loss(true, predicted):
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
        keras.ops.moveaxis(true, 1, 0), keras.ops.moveaxis(predicted, 2, 0),
        from_logits=True))


# By default a head that reads some and one that reads all; the span head with -m slow.
@pytest.mark.parametrize("task", ["token", "pooled", pytest.param("span", marks=pytest.mark.slow)])
def test_weights_a_task_does_not_read_are_left_alone(task):
    backbone = BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_size=8,
                            intermediate_size=16, max_sequence_length=12)
    model = MAKE[task](backbone)
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, 50, (4, 12)).astype("int32"),
         "padding_mask": np.ones((4, 12), "int32"), "segment_ids": np.zeros((4, 12), "int32")}
    y = rng.integers(0, 3 if task != "span" else 12,
                     (4, 12) if task == "token" else (4,)).astype("int32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if task == "span":
        y, loss = np.stack([y, y], axis=1), _span_loss
    model.compile(optimizer=keras.optimizers.AdamW(0.01, weight_decay=0.5), loss=loss)
    before = {w.path: keras.ops.convert_to_numpy(w) for w in backbone.weights}
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    unchanged = sorted(w.path for w in backbone.weights
                       if np.array_equal(before[w.path], keras.ops.convert_to_numpy(w)))
    # The pooler alone is unread by the token and span heads; a pooled classifier reads all.
    assert unchanged == ([] if task == "pooled" else ["pooler/bias", "pooler/kernel"])
