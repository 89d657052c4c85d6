"""AWD-LSTM's language-model objective (Merity et al. 2017), ULMFiT's stages 1 and 2.

    z_t  = LockedDropout_output(h^L_t)
    L    = CE(x_(t+1), z_t E^T + b)                               (tied softmax)
         + alpha * mean(z_t^2)                                    (AR, Sec. 4.6)
         + beta  * mean((h^L_t - h^L_(t-1))^2)                    (TAR, on undropped h)

alpha = 2, beta = 1 (Merity et al. 2017, Sec. 4.6; ULMFiT keeps them). The
means run over real tokens only.

Truncated BPTT (Merity et al. 2017, Sec. 4.1; ULMFiT): with `carry_state=True`
the LSTM states a training batch ends in start the next batch (no gradient
flows back into them), so row i of batch k + 1 must continue row i of batch k:
`keras_ctx.data.lm_stream.BpttStream` lays the corpus out so (every token
after the first a target once per epoch) and draws each batch's length
(bptt, or bptt / 2 with probability 0.05, then N(., 5)); its batches carry
`learning_rate_scale` = length / bptt, which this objective applies to the
optimizer's learning rate for that update (`ScaledLearningRate`, wrapped
around any optimizer's rate at compile). Reset the states each epoch with
`StateReset`. Evaluation starts every batch from zero states.
"""

import keras
import numpy as np
from keras import ops

from keras_ctx.common.validation import positive_int
from keras_ctx.layers.dropout import LockedDropout
from keras_ctx.backend import gathered_rows, replica_rows
from keras_ctx.pretraining.base import Pretrainer, num_replicas
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy, weighted_mean
from keras_ctx.schedules import scale_learning_rate

# Merity et al. 2017, Sec. 4.6 / 5.
ACTIVATION_REGULARIZATION = 2.0
TEMPORAL_ACTIVATION_REGULARIZATION = 1.0


@keras.saving.register_keras_serializable(package="keras_ctx")
class AwdLstmLMPretrainer(Pretrainer):
    """Next-word prediction for `AwdLstmBackbone` with AR/TAR and the output bias.

    Args:
        backbone: an `AwdLstmBackbone` (or any backbone with `logits(hidden)`).
        output_dropout: locked dropout before the softmax (default: the
            backbone's `output_dropout`, 0.4 in ULMFiT).
        activation_regularization: alpha (2).
        temporal_activation_regularization: beta (1).
        batch_size: the fixed (global) batch size of the training stream;
            needed with `carry_state`, to hold the states in a variable. Under
            a tf.distribute strategy replica r reads and writes rows
            r*b .. (r+1)*b - 1 (b = batch_size / replicas).
        carry_state: carry the LSTM states from training batch to training
            batch (truncated BPTT over a continuous stream), or start every
            batch from zero states (default).

    Data: `{"token_ids", "padding_mask"}` batches, targets the inputs shifted
    left (the last position predicts nothing); or `(x, next_token_ids,
    sample_weight)` with explicit targets, as `BpttStream` makes them, where
    x may hold `learning_rate_scale` (batch,) (the update's learning rate is
    multiplied by its value). With `carry_state`, consecutive batches of
    exactly `batch_size` rows that continue one another (`BpttStream`), not
    shuffled. Losses: `lm`, `ar`, `tar`; metrics `loss`, `lm_loss`, `accuracy`.

    Example:
    >>> lm = AwdLstmLMPretrainer(AwdLstmBackbone(vocabulary_size=60000))
    >>> lm.compile(keras.optimizers.Adam(1e-3, beta_1=0.7, beta_2=0.99))
    >>> lm = AwdLstmLMPretrainer(backbone, batch_size=64, carry_state=True)
    >>> lm.compile(keras.optimizers.Adam(1e-3, beta_1=0.7, beta_2=0.99))
    >>> lm.fit(BpttStream(ids, 64, bptt=70).dataset(), callbacks=[StateReset()])
    """

    def __init__(self, backbone, output_dropout=None,
                 activation_regularization=ACTIVATION_REGULARIZATION,
                 temporal_activation_regularization=TEMPORAL_ACTIVATION_REGULARIZATION,
                 batch_size=None, carry_state=False, **kwargs):
        super().__init__(**kwargs)
        if carry_state:
            positive_int("batch_size", batch_size,
                         why="carry_state=True needs the stream's fixed batch size")
        if carry_state and not hasattr(backbone, "forward_pass"):
            raise ValueError(
                f"carry_state=True needs a backbone with `forward_pass(inputs, states)` "
                f"({type(backbone).__name__} has none); use AwdLstmBackbone.")
        if output_dropout is None:
            output_dropout = backbone.get_config().get("output_dropout", 0.0)
        self.backbone = backbone
        self.output_dropout = float(output_dropout)
        self.activation_regularization = float(activation_regularization)
        self.temporal_activation_regularization = float(temporal_activation_regularization)
        self.output_dropout_layer = LockedDropout(self.output_dropout, name="output_dropout")
        self.output_bias = self.add_weight(name="output_bias",
                                           shape=(backbone.vocabulary_size,),
                                           initializer="zeros")
        self.batch_size = batch_size
        self.carry_state = bool(carry_state)
        self.state = None
        if self.carry_state:
            # [h_1, c_1, ..., h_L, c_L] side by side, one row per stream row.
            self._state_sizes = [l.units for l in backbone.lstms for _ in (0, 1)]
            self.state = self.add_weight(
                name="lstm_state", shape=(batch_size, sum(self._state_sizes)),
                initializer="zeros", trainable=False,
                # Every replica assigns the same all-gathered value: keep the first.
                aggregation="only_first_replica")
        # length / bptt of the current update (variable-length BPTT), read by the
        # optimizer's learning rate (`ScaledLearningRate`, set up in compile).
        self.learning_rate_scale = self.add_weight(
            name="learning_rate_scale", shape=(), initializer="ones", trainable=False,
            aggregation="only_first_replica")
        self.lm_loss = keras.metrics.Mean(name="lm_loss")
        self.accuracy = TokenAccuracy(name="accuracy")
        self.objective_metrics = [self.lm_loss, self.accuracy]
        self.built = True  # the backbone is built and the bias made

    def compile(self, optimizer="rmsprop", *args, **kwargs):
        super().compile(optimizer, *args, **kwargs)
        # After Keras' own wrapping (LossScaleOptimizer under mixed_float16).
        scale_learning_rate(self.optimizer, self.learning_rate_scale)

    def logits(self, hidden):
        return ops.cast(self.backbone.logits(hidden), "float32") + self.output_bias

    def call(self, inputs, training=False):
        inputs = {k: v for k, v in inputs.items() if k != "learning_rate_scale"}
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        return self.logits(self.output_dropout_layer(hidden, training=training))

    def reset_state(self):
        """Zeroes the carried states (start of an epoch or of a new stream)."""
        if self.state is not None:
            self.state.assign(ops.zeros(self.state.shape, self.state.dtype))

    def _carried_states(self, rows):
        """This replica's rows of the carried states: [(h, c) per LSTM], no gradient."""
        if rows * num_replicas() != self.batch_size:
            raise ValueError(
                f"The carried state holds batches of {self.batch_size} rows but a batch "
                f"has {rows} per replica x {num_replicas()} replicas: batch the stream "
                f"with exactly batch_size={self.batch_size} and drop_remainder=True "
                "(keras_ctx.data.lm_stream.BpttStream does).")
        state = replica_rows(self.state, rows, axis=0)
        ends = np.cumsum(self._state_sizes)[:-1].tolist()
        parts = ops.split(ops.stop_gradient(state), ends, axis=-1)
        return list(zip(parts[0::2], parts[1::2]))

    def _carry(self, states):
        """Stores every replica's final states in its rows (all-gathered in replica order)."""
        state = ops.concatenate([ops.cast(s, "float32") for pair in states for s in pair],
                                axis=-1)
        self.state.assign(ops.stop_gradient(gathered_rows(state, axis=0)))

    def compute_losses(self, batch, training):
        inputs, next_ids, target_weights = keras.utils.unpack_x_y_sample_weight(batch)
        inputs = dict(inputs)
        scale = inputs.pop("learning_rate_scale", None)
        if training:
            # Every row holds the same length / bptt; the optimizer reads it next.
            self.learning_rate_scale.assign(
                1.0 if scale is None else ops.cast(scale[0], "float32"))
        if training and self.carry_state:
            rows = inputs["token_ids"].shape[0]
            if rows is None:
                rows = self.batch_size // num_replicas()
            outputs = self.backbone.forward_pass(inputs, self._carried_states(rows),
                                            training=training)
            self._carry(outputs["states"])
            hidden = outputs["sequence_output"]
        else:
            hidden = self.backbone(inputs, training=training)["sequence_output"]
        dropped = self.output_dropout_layer(hidden, training=training)
        real = ops.cast(inputs["padding_mask"], "float32")
        if next_ids is None:
            # Targets are the inputs shifted: the last position predicts nothing.
            logits = self.logits(dropped[:, :-1])
            labels = inputs["token_ids"][:, 1:]
            weights = real[:, 1:]
        else:
            logits, labels = self.logits(dropped), next_ids
            weights = real if target_weights is None else ops.cast(target_weights, "float32")
        lm = weighted_cross_entropy(labels, logits, weights)
        self.lm_loss.update_state(lm)
        self.accuracy.update_state(labels, logits, sample_weight=weights)
        losses = {"lm": lm}
        if training:
            dropped = ops.cast(dropped, "float32")
            hidden = ops.cast(hidden, "float32")
            losses["ar"] = self.activation_regularization * weighted_mean(
                ops.mean(ops.square(dropped), axis=-1), real)
            step = ops.mean(ops.square(hidden[:, 1:] - hidden[:, :-1]), axis=-1)
            losses["tar"] = self.temporal_activation_regularization * weighted_mean(
                step, real[:, 1:] * real[:, :-1])
        return losses

    def get_config(self):
        return dict(super().get_config(), output_dropout=self.output_dropout,
                    activation_regularization=self.activation_regularization,
                    temporal_activation_regularization=self.temporal_activation_regularization,
                    batch_size=self.batch_size, carry_state=self.carry_state)


class StateReset(keras.callbacks.Callback):
    """Zeroes an `AwdLstmLMPretrainer`'s carried states at each epoch's start,
    as Merity et al.'s training loop does (the stream starts over)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.model.reset_state()
