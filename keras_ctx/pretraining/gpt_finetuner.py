"""GPT's supervised fine-tuning (Radford et al., 2018, Sec. 3.2).

    L = L_cls + lambda * L_LM     (Eq. 5, lambda = 0.5)

on inputs `<start> s_1 <delim> s_2 ... <extract>`
(`keras_ctx.data.task_inputs.gpt_finetuning_inputs`), classifying from the
final hidden state of the <extract> token; L_LM is the pretraining objective
(`keras_ctx.pretraining.causal_lm`) kept as an auxiliary loss.

An objective like the others (a `Pretrainer` naming its losses), so it lives here;
`keras_ctx.tasks.GPTFineTuner` names it too. Its Keras name, `keras_ctx>GPTFineTuner`,
is the one files saved when it lived in keras_ctx.tasks hold (they load as they did).
"""

import keras
from keras import ops

from keras_ctx.common import validation
from keras_ctx.layers import Dropout
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.causal_lm import masked_token_loss, next_token_targets
from keras_ctx.pretraining.losses import TokenAccuracy


@keras.saving.register_keras_serializable(package="keras_ctx")
class GPTFineTuner(Pretrainer):
    """GPT's supervised fine-tuning: L = L_cls + lambda * L_LM (Radford et al., 2018).

    The class logits come from a linear layer on the hidden state of the last
    real token (the <extract> token of `gpt_finetuning_inputs`).

    Args:
        backbone: a decoder backbone with `logits(hidden)`.
        num_classes: output classes.
        lm_weight: lambda, 0.5 in the paper.
        dropout: on the extracted state (0.1 in the paper).

    Data: `(inputs, labels)` with inputs `{"token_ids", "padding_mask"}`.
    Metrics: `loss`, `classification_loss`, `lm_loss`, `accuracy`,
    `lm_accuracy`. `call` returns class logits.
    """

    def __init__(self, backbone, num_classes, lm_weight=0.5, dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        num_classes = validation.positive_int("num_classes", num_classes, least=2)
        lm_weight = validation.non_negative_number("lm_weight", lm_weight)
        dropout = validation.rate("dropout", dropout)
        self.backbone = backbone
        self.num_classes = num_classes
        self.lm_weight = float(lm_weight)
        self.dropout = dropout
        self.dropout_layer = Dropout(dropout)
        self.classifier = keras.layers.Dense(
            num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="classifier")
        self.classification_loss = keras.metrics.Mean(name="classification_loss")
        self.lm_loss = keras.metrics.Mean(name="lm_loss")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.lm_accuracy = TokenAccuracy(name="lm_accuracy")
        self.objective_metrics = [self.classification_loss, self.lm_loss, self.accuracy,
                                  self.lm_accuracy]

    def _forward(self, inputs, training):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        last = ops.sum(ops.cast(inputs["padding_mask"], "int32"), axis=1) - 1
        extract = ops.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
        class_logits = self.classifier(self.dropout_layer(extract, training=training))
        return class_logits, hidden

    def call(self, inputs, training=False):
        return self._forward(inputs, training)[0]

    def compute_losses(self, batch, training):
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(batch)
        class_logits, hidden = self._forward(inputs, training)
        lm_logits = self.backbone.logits(hidden)[:, :-1]
        lm_labels, lm_weights = next_token_targets(inputs)
        classification = ops.mean(keras.losses.sparse_categorical_crossentropy(
            labels, ops.cast(class_logits, "float32"), from_logits=True))
        language_model = masked_token_loss(lm_logits, lm_labels, lm_weights)
        self.classification_loss.update_state(classification)
        self.lm_loss.update_state(language_model)
        self.accuracy.update_state(labels, class_logits)
        self.lm_accuracy.update_state(lm_labels, lm_logits, sample_weight=lm_weights)
        return {"classification": classification, "lm": language_model}

    def total_loss(self, losses):
        return losses["classification"] + self.lm_weight * losses["lm"]

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_classes": self.num_classes,
            "lm_weight": self.lm_weight,
            "dropout": self.dropout,
        })
        return config


__all__ = ["GPTFineTuner"]
