"""The tasks' TensorFlow side: Keras' own step, and weight decay through tf.distribute."""

import keras
import tensorflow as tf

from keras_ctx.common import compat


class Step:
    """Keras' own train step (TensorFlow's optimizer applies to any trainable subset)."""


def check_unfreezing(model):
    """Every model's step follows a changing trainable set here."""


def decay_weights(optimizer, variables, factor_of):
    """AdamW's decoupled decay, w -= w * wd * lr * factor_of(w), per tf.distribute replica
    set (Keras' private hooks, named with their pinned versions in common/compat.py)."""
    use_weight_decay = compat.bound(optimizer, "use_weight_decay")

    def apply(distribution, variables):
        def decay(variable):
            if use_weight_decay(variable):
                lr = tf.cast(optimizer.learning_rate, variable.dtype) * factor_of(variable)
                variable.assign_sub(variable * tf.cast(optimizer.weight_decay,
                                                       variable.dtype) * lr)

        for variable in variables:
            if isinstance(variable, keras.Variable):
                variable = variable.value
            distribution.extended.update(variable, decay, group=False)

    compat.resolve("maybe_merge_call")(
        apply, compat.attribute(optimizer, "distribution_strategy"), variables)
