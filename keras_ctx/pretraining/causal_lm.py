"""Causal language modelling (GPT, GPT-2).

Pretraining maximises  L_LM = sum_t log P(u_t | u_<t)  (Radford et al., 2018, Eq. 1).
GPT's fine-tuning objective, which adds it as an auxiliary loss, is
`keras_ctx.pretraining.gpt_finetuner.GPTFineTuner`.
"""

import keras
from keras import ops

from keras_ctx import generation
from keras_ctx.pretraining.base import TokenLikelihoodPretrainer
from keras_ctx.pretraining.losses import weighted_cross_entropy


def masked_token_loss(logits, labels, weights):
    """Mean sparse cross-entropy over positions with weight > 0, in float32."""
    return weighted_cross_entropy(labels, logits, weights)


def next_token_targets(inputs):
    """Logits at t predict token t+1: labels and weights for positions 0..T-2.

    Returns:
        (labels (batch, T-1) int, weights (batch, T-1) float32) from
        `inputs["token_ids"]` and `inputs["padding_mask"]`.
    """
    token_ids = inputs["token_ids"]
    weights = ops.cast(inputs["padding_mask"], "float32")[:, 1:]
    return token_ids[:, 1:], weights


@keras.saving.register_keras_serializable(package="keras_ctx")
class CausalLMPretrainer(TokenLikelihoodPretrainer):
    """Next-token prediction for any decoder backbone with `logits(hidden)`.

    Data: `{"token_ids", "padding_mask"}` batches (fixed length,
    drop_remainder=True for jit_compile); targets are the inputs shifted left.

    Metrics: `loss`, `accuracy` (next-token accuracy).

    Example:
    >>> lm = CausalLMPretrainer(GPTBackbone.from_preset("gpt2"))
    >>> lm.compile(optimizer=keras.optimizers.AdamW(2.5e-4), jit_compile=True)
    >>> lm.fit(token_dataset)
    >>> lm.generate(prompt_ids, prompt_mask, max_length=64, sampler="top_k")
    """

    def call(self, inputs, training=False):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        return self.backbone.logits(hidden)

    def predictions(self, batch, training):
        inputs, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        # The last position predicts nothing: drop it before the vocabulary projection.
        logits = self.backbone.logits(hidden[:, :-1])
        return (logits, *next_token_targets(inputs))

    def generate(self, token_ids, padding_mask=None, max_length=None, **kwargs):
        """See `keras_ctx.generation.generate`."""
        return generation.generate(self.backbone, token_ids, padding_mask,
                                   max_length=max_length, **kwargs)

