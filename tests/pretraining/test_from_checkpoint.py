"""Continuing a converted checkpoint's pretraining: its MLM head, and AdamW's first step on it.

Ground truth: numpy forward passes of the checkpoint's own tensors
(tests/convert/numpy_refs.py), and AdamW (Loshchilov & Hutter, 2019) in numpy
on the dense gradients, what PyTorch's AdamW does with BERT's embeddings.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.convert.heads import masked_lm_from_huggingface
from keras_ctx.convert.huggingface import from_huggingface
from keras_ctx.pretraining import ElectraPretrainer, MaskedLMPretrainer
from tests import references
from tests.autodiff import no_gradient, value_and_gradients
from tests.convert import numpy_refs
from tests.convert.head_checkpoints import (
    BERT,
    _mlm_reference,
    bert_mlm_tensors,
    electra_generator_checkpoint,
)
from tests.convert.hf_checkpoints import write_checkpoint

_numpy = keras.ops.convert_to_numpy


IDS = np.array([[2, 7, 11, 29, 3, 4], [2, 5, 6, 3, 9, 3]], "int32")
# Segment 0 read 6 times and segment 1 6 times per batch: the rows Adam got wrong.
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]], "int32")
POSITIONS = np.array([[1, 4], [2, 4]], "int32")


def _converted_bert(tmp_path):
    config = dict(BERT, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    tensors = bert_mlm_tensors()
    with pytest.warns(UserWarning, match="pooler"):
        backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path, config, tensors))
    return config, tensors, backbone, head


def _checkpoint_mlm_batch():
    return {"token_ids": IDS, "padding_mask": np.ones_like(IDS), "segment_ids": SEGMENTS,
            "mask_positions": POSITIONS, "mask_ids": np.array([[7, 29], [6, 9]], "int32"),
            "mask_weights": np.ones(POSITIONS.shape, "float32")}


def test_masked_lm_continues_from_the_checkpoint_head(tmp_path):
    config, tensors, backbone, head = _converted_bert(tmp_path)
    pretrainer = MaskedLMPretrainer(backbone, mlm_head=head)
    sequence = numpy_refs.numpy_bert(tensors, config, IDS, np.ones_like(IDS), SEGMENTS,
                                     prefix="bert.")
    want = _mlm_reference(tensors, sequence, "cls.predictions.transform.dense",
                          "cls.predictions.transform.LayerNorm", "cls.predictions.bias",
                          "bert.embeddings.word_embeddings.weight", references.gelu, 1e-12)
    want = np.take_along_axis(want, POSITIONS[..., None], axis=1)
    np.testing.assert_allclose(_numpy(pretrainer(_checkpoint_mlm_batch())["mlm"]), want, atol=2e-4)
    # A head read with another backbone, or a conflicting head_transform, is refused.
    with pytest.raises(ValueError, match="not tied to this backbone"):
        MaskedLMPretrainer(from_huggingface(str(tmp_path)), mlm_head=head)
    with pytest.raises(ValueError, match="head_transform=False"):
        MaskedLMPretrainer(backbone, mlm_head=head, head_transform=False)


def test_electra_continues_from_the_generator_checkpoint_head(tmp_path):
    config, tensors = electra_generator_checkpoint(seed=3)
    directory = write_checkpoint(tmp_path, config, tensors)
    generator, head = masked_lm_from_huggingface(directory)
    pretrainer = ElectraPretrainer(generator, from_huggingface(directory),
                                   share_embeddings=False, mlm_head=head)
    ids = IDS[:, :5]
    sequence = numpy_refs.numpy_electra(tensors, ids, np.ones_like(ids), np.zeros_like(ids),
                                        4, 2)
    want = _mlm_reference(tensors, sequence, "generator_predictions.dense",
                          "generator_predictions.LayerNorm", "generator_lm_head.bias",
                          "electra.embeddings.word_embeddings.weight", references.gelu, 1e-12)
    hidden = generator({"token_ids": ids, "padding_mask": np.ones_like(ids),
                        "segment_ids": np.zeros_like(ids)})["sequence_output"]
    np.testing.assert_allclose(_numpy(pretrainer.mlm_head(hidden)), want, atol=2e-4)


def test_one_adamw_step_on_a_converted_bert_equals_the_dense_computation(tmp_path):
    _, _, backbone, head = _converted_bert(tmp_path)
    pretrainer = MaskedLMPretrainer(backbone, mlm_head=head)
    lr, decay, b1, b2, eps = 0.01, 0.01, 0.9, 0.999, 1e-6
    optimizer = keras.optimizers.AdamW(lr, weight_decay=decay, beta_1=b1, beta_2=b2,
                                       epsilon=eps)
    batch = _checkpoint_mlm_batch()
    pretrainer(batch)  # built before the gradient (JAX creates no variables in a trace)
    variables = pretrainer.trainable_variables
    _, _, gradients = value_and_gradients(
        lambda: pretrainer.total_loss(pretrainer.compute_losses(batch, training=True)),
        variables=variables)
    dense = {v.path: g.astype("float64") for v, g in zip(variables, gradients)
             if not no_gradient(g)}
    before = {v.path: _numpy(v).astype("float64") for v in variables}
    # Eagerly on every backend: tracing the step took 25 s on TensorFlow; on JAX it runs the
    # ops the gradients above compiled (one jax.jit measured no faster: tests/execution.py).
    pretrainer.compile(optimizer, run_eagerly=True)
    pretrainer.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
    segments = backbone.get_layer("segment_embedding").embeddings.path
    assert segments in dense
    for v in variables:
        if v.path not in dense:
            continue
        w, g = before[v.path], dense[v.path]
        w = w - lr * decay * w                       # AdamW's decoupled decay, then Adam
        m, s = (1 - b1) * g, (1 - b2) * g * g
        want = w - lr * np.sqrt(1 - b2) / (1 - b1) * m / (np.sqrt(s) + eps)
        np.testing.assert_allclose(_numpy(v), want, atol=1e-5, err_msg=v.path)
