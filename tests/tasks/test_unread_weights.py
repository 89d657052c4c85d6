"""A task's loss leaves the backbone weights it does not read alone, on every backend.

A token classifier or span QA head reads `sequence_output`; BERT's pooler feeds only
`pooled_output`. TensorFlow's and PyTorch's gradient of the pooler is None and their
optimizer skips it; JAX's is zeros, and AdamW's decoupled weight decay would still
shrink it (w -= lr * wd * w) unless the task declares it unread (Task.reads_outputs).
"""

import pytest

from tests.backends import run_script

_FIT = """
import json, sys
import keras, numpy as np
from keras_ctx.models import BertBackbone
from keras_ctx.tasks import SequenceClassifier, SpanQuestionAnswerer, TokenClassifier
keras.utils.set_random_seed(0)
backbone = BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_size=8,
                        intermediate_size=16, max_sequence_length=12)
make = {"token": lambda: TokenClassifier(backbone, num_labels=3),
        "span": lambda: SpanQuestionAnswerer(backbone),
        "pooled": lambda: SequenceClassifier(backbone, num_classes=3, pooling="pooled")}
task = make[sys.argv[1]]()
rng = np.random.default_rng(0)
x = {"token_ids": rng.integers(1, 50, (4, 12)).astype("int32"),
     "padding_mask": np.ones((4, 12), "int32"), "segment_ids": np.zeros((4, 12), "int32")}
y = rng.integers(0, 3 if sys.argv[1] != "span" else 12,
                 (4, 12) if sys.argv[1] == "token" else (4,)).astype("int32")
if sys.argv[1] == "span":
    y = np.stack([y, y], axis=1)
    loss = lambda t, p: keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
        keras.ops.moveaxis(t, 1, 0), keras.ops.moveaxis(p, 2, 0), from_logits=True))
else:
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
task.compile(optimizer=keras.optimizers.AdamW(0.01, weight_decay=0.5), loss=loss)
before = {w.path: keras.ops.convert_to_numpy(w) for w in backbone.weights}
task.fit(x, y, batch_size=4, epochs=2, verbose=0)
print(json.dumps(sorted(p for p, w in ((w.path, w) for w in backbone.weights)
                        if np.array_equal(before[p], keras.ops.convert_to_numpy(w)))))
"""


# By default the backend whose step had the fault, with a head that reads some and one
# that reads all;
# every pair with -m slow (~15 s each: a process per pair).
DEFAULT = {("jax", "token"), ("jax", "pooled")}


@pytest.mark.parametrize("backend, task", [
    pytest.param(b, t, marks=() if (b, t) in DEFAULT else pytest.mark.slow)
    for b in ("tensorflow", "jax", "torch") for t in ("token", "span", "pooled")])
def test_weights_a_task_does_not_read_are_left_alone(backend, task):
    unchanged = run_script(backend, _FIT, task)
    # The pooler alone is unread by the token and span heads; a pooled classifier reads all.
    assert unchanged == ([] if task == "pooled" else ["pooler/bias", "pooler/kernel"])
