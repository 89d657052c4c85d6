"""AWD-LSTM's language-model objective (Merity et al. 2017), ULMFiT's stages 1 and 2.

    z_t  = LockedDropout_output(h^L_t)
    L    = CE(x_(t+1), z_t E^T + b)                               (tied softmax)
         + alpha * mean(z_t^2)                                    (AR, Sec. 4.6)
         + beta  * mean((h^L_t - h^L_(t-1))^2)                    (TAR, on undropped h)

alpha = 2, beta = 1 (Merity et al. 2017, Sec. 4.6; ULMFiT keeps them). The
means run over real tokens only. Training batches are fixed-length chunks with
a fresh LSTM state per batch (no state carried between batches).
"""

import keras
from keras import ops

from keras_ctx.layers.dropout import LockedDropout
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy, weighted_mean

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

    Data: `{"token_ids", "padding_mask"}` batches; targets are the inputs
    shifted left. Losses: `lm`, `ar`, `tar`; metrics `loss`, `lm_loss`,
    `accuracy`.

    Example:
    >>> lm = AwdLstmLMPretrainer(AwdLstmBackbone(vocabulary_size=60000))
    >>> lm.compile(keras.optimizers.Adam(1e-3, beta_1=0.7, beta_2=0.99))
    """

    def __init__(self, backbone, output_dropout=None,
                 activation_regularization=ACTIVATION_REGULARIZATION,
                 temporal_activation_regularization=TEMPORAL_ACTIVATION_REGULARIZATION,
                 **kwargs):
        super().__init__(**kwargs)
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
        self.lm_loss = keras.metrics.Mean(name="lm_loss")
        self.accuracy = TokenAccuracy(name="accuracy")
        self.objective_metrics = [self.lm_loss, self.accuracy]
        self.built = True  # the backbone is built and the bias made

    def logits(self, hidden):
        return ops.cast(self.backbone.logits(hidden), "float32") + self.output_bias

    def call(self, inputs, training=False):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        return self.logits(self.output_dropout_layer(hidden, training=training))

    def compute_losses(self, batch, training):
        inputs, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        dropped = self.output_dropout_layer(hidden, training=training)
        # The last position predicts nothing.
        logits = self.logits(dropped[:, :-1])
        labels = inputs["token_ids"][:, 1:]
        real = ops.cast(inputs["padding_mask"], "float32")
        weights = real[:, 1:]
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
                    temporal_activation_regularization=self.temporal_activation_regularization)
