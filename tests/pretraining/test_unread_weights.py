"""Which weights a minibatch's update trains is declared once (`unread_weights`), and the
declaration is what TensorFlow's gradient finds.

TensorFlow's gradient of a weight the loss does not read is None, and its step leaves
that weight and its optimizer slots alone; JAX's gradient is zeros, which Adam's moments
and weight decay would still apply. So every backend trains `step_variables(batch)`,
decided when the objective is built, and this file holds that set to the ground truth
(the weights the backend's autodiff reaches) for every objective of the matrix, then
checks that Adam with weight decay leaves the unread weights as they were (the suite's
backend switch runs both on each backend).
"""

import keras
import numpy as np
import pytest

from keras_ctx.common import compat
from tests.autodiff import no_gradient, value_and_gradients
from tests.execution import GRADIENTS
from tests.pretraining.backend_cases import _batches
from tests.pretraining.matrix_cases import CASES

# Objectives whose minibatches leave weights unread (CVT's are checked by module below).
UNREAD = {"roberta": {"pooler/kernel", "pooler/bias"},
          "span_bert": {"pooler/kernel", "pooler/bias"}}
DEFAULT = ("bert", "roberta", "span_bert", "cvt", "electra_discriminator_stage")


def _built(name):
    make, make_batch = CASES[name]
    batch = make_batch()
    keras.utils.set_random_seed(0)
    model = make()
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    compat.resolve("symbolic_build")(model, data_batch=batch if isinstance(batch, tuple)
                                     else (batch,))
    return model, batch


def _minibatches(model, batch):
    tensors = keras.tree.map_structure(keras.ops.convert_to_tensor, batch)
    return model.step_batches(model.unpack_batch(tensors if isinstance(tensors, tuple)
                                                 else (tensors,)))


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT else
                                               pytest.mark.slow) for n in CASES])
def test_the_declared_step_variables_are_those_the_loss_reaches(name):
    model, batch = _built(name)
    for minibatch in _minibatches(model, batch):
        candidates = model.trainable_variables
        if name == "electra_discriminator_stage":  # a stage trains a subset on purpose
            candidates = model.step_variables(minibatch)
        _, _, gradients = value_and_gradients(
            lambda: model.total_loss(model.compute_losses(minibatch, training=True)),
            variables=candidates, compiled=GRADIENTS)
        reached = {v.path for v, g in zip(candidates, gradients) if not no_gradient(g)}
        declared = {v.path for v in model.step_variables(minibatch)}
        assert declared == reached, (name, sorted(declared ^ reached))
        assert reached  # the comparison is not vacuous


def test_cvt_declares_other_branches_modules_unread():
    model, batch = _built("cvt")
    minibatches = list(_minibatches(model, batch))
    unread = [{w.path.split("/")[0] for w in model.unread_weights(b)} for b in minibatches]
    # L_a: every module but a's primary; U: the primary modules.
    assert "a_primary" not in unread[0] and "b_primary" in unread[0] and "a_full" in unread[0]
    assert unread[1] == {"a_primary", "b_primary"}
    assert "b_primary" not in unread[2] and "a_primary" in unread[2]


def test_adam_with_weight_decay_leaves_unread_weights_alone():
    for name, unread in UNREAD.items():
        make, make_batch = CASES[name]
        model, batch = make(), make_batch()
        model.compile(optimizer=keras.optimizers.AdamW(0.1, weight_decay=0.5))
        model.fit(_batches(batch, 1), steps_per_epoch=1, epochs=1, verbose=0)
        before = {v.path: keras.ops.convert_to_numpy(v) for v in model.trainable_variables}
        model.fit(_batches(batch, 1), steps_per_epoch=1, epochs=1, verbose=0)
        kept = {v.path for v in model.trainable_variables
                if np.array_equal(before[v.path], keras.ops.convert_to_numpy(v))}
        assert kept == unread, (name, sorted(kept))
