"""Sequence-to-sequence objectives: span corruption (T5), denoising (BART), translation.

All are teacher-forced maximum likelihood of the target given the source:
    L = - sum_t log P(y_t | y_<t, x)
They differ only in how (x, y) are made (`keras_ctx.data.noise`), so one
pretrainer trains any encoder-decoder backbone on all of them. Text-to-text
fine-tuning (T5) is the same objective with a task prefix on the input
(`keras_ctx.data.task_inputs.add_task_prefix`).
"""

import keras
from keras import ops

from keras_ctx import generation
from keras_ctx.pretraining.base import TokenLikelihoodPretrainer


@keras.saving.register_keras_serializable(package="keras_ctx")
class Seq2SeqPretrainer(TokenLikelihoodPretrainer):
    """Teacher-forced target likelihood for an encoder-decoder backbone (T5, BART).

    Data: `(x, labels, label_weights)` from `keras_ctx.data.noise.seq2seq_features`,
    x = {"encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
    "decoder_padding_mask"} at fixed lengths.

    Metrics: `loss`, `accuracy` (target token accuracy).

    Example:
    >>> model = Seq2SeqPretrainer(T5Backbone.from_preset("t5-small"))
    >>> model.compile(optimizer="adam", jit_compile=True)
    >>> model.fit(span_corrupted_dataset)
    >>> model.generate(encoder_ids, encoder_mask, max_length=32)
    """

    def call(self, inputs, training=False):
        hidden = self.backbone(inputs, training=training)["decoder_sequence_output"]
        return self.backbone.logits(hidden)

    def predictions(self, batch, training):
        inputs, labels, weights = keras.utils.unpack_x_y_sample_weight(batch)
        if labels is None:
            raise ValueError(
                "Seq2SeqPretrainer needs (inputs, labels[, weights]); map your "
                "dataset with keras_ctx.data.noise.seq2seq_features."
            )
        if weights is None:
            weights = ops.cast(inputs["decoder_padding_mask"], "float32")
        return self(inputs, training=training), labels, weights

    def generate(self, encoder_token_ids, encoder_padding_mask=None, max_length=32,
                 **kwargs):
        """See `keras_ctx.generation.generate_seq2seq`."""
        return generation.generate_seq2seq(self.backbone, encoder_token_ids,
                                           encoder_padding_mask, max_length=max_length,
                                           **kwargs)
