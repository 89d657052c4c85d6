"""The tasks' JAX side: Keras' train step with the optimizer applied to the weights
trainable now (`GradualUnfreezing` changes them between epochs), and weight decay."""

import jax
import keras
from keras import ops

from keras_ctx.common import compat
from keras_ctx.pretraining._jax import apply_optimizer


class Step:
    """`train_step(state, data)` as Keras' JAX trainer writes it, but for the optimizer."""

    def train_step(self, state, data):
        trainable, non_trainable, optimizer, metrics = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        (_, (loss, y_pred, non_trainable, metrics)), gradients = jax.value_and_grad(
            self.compute_loss_and_updates, has_aux=True)(
                trainable, non_trainable, metrics, x, y, sample_weight, training=True,
                optimizer_variables=optimizer)
        trainable, optimizer = apply_optimizer(self, optimizer, gradients, trainable,
                                               non_trainable)
        logs, metrics = self._update_metrics_variables(metrics, loss, x, y, y_pred,
                                                       sample_weight)
        return logs, (trainable, non_trainable, optimizer, metrics)


def check_unfreezing(model):
    """Raises (one line) unless `model`'s JAX step follows a changing trainable set."""
    from keras_ctx.pretraining import Pretrainer

    if not isinstance(model, (Step, Pretrainer)):
        raise ValueError(
            f"GradualUnfreezing on JAX needs a keras_ctx task or pretrainer: Keras' own "
            f"JAX step ({type(model).__name__}) updates only the weights its optimizer "
            "was built with. Subclass keras_ctx.tasks.Task, or fit on TensorFlow.")


def decay_weights(optimizer, variables, factor_of):
    """AdamW's decoupled decay, w -= w * wd * lr * factor_of(w), as Keras' base optimizer
    writes it (inside the stateless step the assignments become the new state)."""
    use_weight_decay = compat.bound(optimizer, "use_weight_decay")
    for variable in variables:
        if use_weight_decay(variable):
            lr = ops.cast(optimizer.learning_rate, variable.dtype) * factor_of(variable)
            variable.assign(variable - variable * ops.cast(optimizer.weight_decay,
                                                           variable.dtype) * lr)
