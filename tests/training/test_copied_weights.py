"""A model built from another's weights trains without touching the other's. On JAX
`variable.assign(other)` shares the other's buffer, and Keras' jitted step donates the
buffers it updates: the original's weights were deleted under it ("Array has been
deleted"), or a step donated one buffer twice. Runs on every backend."""

import keras
import numpy as np

from keras_ctx.models import BertBackbone
from keras_ctx.pretraining import MaskedLMPretrainer
from keras_ctx.tasks.monolingual_transfer import resize_vocabulary
from tests.execution import FEW_STEPS

LENGTH = 8


def _bert(vocabulary_size=30):
    return BertBackbone(vocabulary_size=vocabulary_size, num_layers=1, num_heads=2,
                        hidden_size=8, intermediate_size=16, max_sequence_length=LENGTH,
                        dropout=0.0)


def _inputs(rows=2):
    ids = np.arange(rows * LENGTH, dtype="int32").reshape(rows, LENGTH) % 20 + 5
    return {"token_ids": ids, "padding_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids)}


def _weight_values(model):
    return [np.array(keras.ops.convert_to_numpy(w)) for w in model.weights]


def _two_masked_positions_batch():
    batch = _inputs(4)
    batch.update(mask_positions=np.array([[1, 3]] * 4, "int32"),
                 mask_ids=np.array([[7, 9]] * 4, "int32"),
                 mask_weights=np.ones((4, 2), "float32"))
    return batch


def test_a_resized_backbone_trains_and_the_original_stays_as_it_was():
    original = _bert()
    before, outputs = _weight_values(original), original(_inputs())["sequence_output"]
    resized = resize_vocabulary(original, 40, seed=0)
    pretrainer = MaskedLMPretrainer(resized)
    pretrainer.compile(keras.optimizers.SGD(0.5), **FEW_STEPS)
    pretrainer.fit(_two_masked_positions_batch(), epochs=2, verbose=0)
    for kept, now in zip(before, _weight_values(original), strict=True):
        np.testing.assert_array_equal(kept, now)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        original(_inputs())["sequence_output"]), keras.ops.convert_to_numpy(outputs), atol=1e-6)
    moved = [w for w in resized.weights if "token_embedding" not in w.path]
    assert any(not np.array_equal(a, keras.ops.convert_to_numpy(b))
               for a, b in zip([v for v, w in zip(before, original.weights)
                                if "token_embedding" not in w.path], moved, strict=True))


def test_a_head_loaded_from_another_pretrainer_trains_and_the_source_stays_as_it_was():
    backbone = _bert()  # the head is tied to it (as a checkpoint's head and its backbone)
    source = MaskedLMPretrainer(backbone)
    source(_two_masked_positions_batch())  # builds its head

    def own(head):  # the head's own weights, not the (shared, trained) token table
        table = backbone.token_embedding.embeddings
        return [np.array(keras.ops.convert_to_numpy(w)) for w in head.weights if w is not table]

    before = own(source.mlm_head)
    pretrainer = MaskedLMPretrainer(backbone, mlm_head=source.mlm_head)
    pretrainer.compile(keras.optimizers.SGD(0.5), **FEW_STEPS)
    pretrainer.fit(_two_masked_positions_batch(), epochs=2, verbose=0)
    assert len(before) >= 3  # transform kernel and bias, layer norm, output bias
    for kept, now in zip(before, own(source.mlm_head), strict=True):
        np.testing.assert_array_equal(kept, now)
    assert any(not np.array_equal(a, b) for a, b in zip(before, own(pretrainer.mlm_head),
                                                         strict=True))
