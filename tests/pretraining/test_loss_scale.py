"""mixed_float16's dynamic loss scale follows Keras' rule on every backend (the suite's
backend switch runs it on each).

JAX's step applies a LossScaleOptimizer through its public state
(keras_ctx/backend/jax.py: Keras' own `apply` branches with a stateful `cond`
that JAX cannot trace). The rule, by hand: each finite step counts; after
`dynamic_growth_steps` of them the scale doubles and the count restarts; a
non-finite step applies nothing, halves the scale and restarts the count.
"""

import keras
import numpy as np

from tests.pretraining.backend_cases import _batches
from tests.pretraining.matrix_cases import CASES


def test_the_loss_scale_grows_after_finite_steps_and_halves_on_overflow():
    keras.config.set_dtype_policy("mixed_float16")  # the suite's fixture restores float32
    make, make_batch = CASES["bert"]
    model, batch = make(), make_batch()
    optimizer = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.01), initial_scale=2.0 ** 10, dynamic_growth_steps=2)
    model.compile(optimizer=optimizer)

    def weights():
        return np.concatenate([keras.ops.convert_to_numpy(v).ravel().astype("float64")
                               for v in model.trainable_variables])

    scales = []
    for step in range(4):
        if step == 3:  # a loss scale so large that float16 gradients overflow
            optimizer.dynamic_scale.assign(2.0 ** 60)
            before = weights()
        model.fit(_batches(batch, 1), steps_per_epoch=1, epochs=1, verbose=0)
        scales.append([float(keras.ops.convert_to_numpy(optimizer.dynamic_scale)),
                       int(keras.ops.convert_to_numpy(optimizer.step_counter))])
    # 2^10: one finite step (count 1), a second (doubles: 2^11, count 0), a third
    # (count 1); then 2^60 overflows: halved to 2^59, count 0, weights unchanged.
    assert scales == [[2.0 ** 10, 1], [2.0 ** 11, 0], [2.0 ** 11, 1], [2.0 ** 59, 0]]
    np.testing.assert_array_equal(weights(), before)
