"""The tasks' train step on Keras' JAX backend: Keras' own, with the optimizer applied
to the weights trainable now (`GradualUnfreezing` changes them between epochs)."""

import jax
import keras

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
