"""Causal language modelling (GPT, GPT-2; XLM's CLM).

Pretraining maximises  L_LM = sum_t log P(u_t | u_<t)  (Radford et al., 2018, Eq. 1;
Lample & Conneau 2019, Sec. 3.2, XLM's CLM over streams with language embeddings).
GPT's fine-tuning objective, which adds it as an auxiliary loss, is
`keras_ctx.pretraining.gpt_finetuner.GPTFineTuner`.
"""

import keras
from keras import ops

from keras_ctx import generation
from keras_ctx.layers.heads import MaskedLMHead
from keras_ctx.pretraining.base import TokenLikelihoodPretrainer
from keras_ctx.pretraining.masked_lm import (backbone_inputs, checkpoint_head_settings,
                                             load_head_weights, sequence_width)
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
    """Next-token prediction for any decoder backbone with `logits(hidden)`, or with
    XLM's output layer.

    Args:
        backbone: a causal backbone (GPTBackbone; XLMBackbone with `causal=True`).
        output_bias: False: the backbone's own `logits(hidden)` (GPT's tied table);
            True: XLM's `PredLayer`, the tied table plus a bias, no transform
            (facebookresearch/XLM xlm/model/transformer.py @cd281d3), for backbones
            with a `token_embedding` and no `logits` (XLM's CLM models).
        lm_head: with `output_bias`, a checkpoint's `MaskedLMHead` (transform=False)
            to continue from (its bias is copied), tied to `backbone.token_embedding`:
            `keras_ctx.convert.heads.masked_lm_from_huggingface` of an
            XLMWithLMHeadModel directory gives both. None: a fresh, zero bias.

    Data: `{"token_ids", "padding_mask"}` batches, plus whatever else the backbone
    takes (XLM: `position_ids`, `language_ids`); fixed length,
    drop_remainder=True for jit_compile; targets are the inputs shifted left.

    Metrics: `loss`, `accuracy` (next-token accuracy).

    Example:
    >>> lm = CausalLMPretrainer(GPTBackbone.from_preset("gpt2"))
    >>> lm.compile(optimizer=keras.optimizers.AdamW(2.5e-4), jit_compile=True)
    >>> lm.fit(token_dataset)
    >>> lm.generate(prompt_ids, prompt_mask, max_length=64, sampler="top_k")
    >>> clm = CausalLMPretrainer(XLMBackbone.from_preset("xlm-clm-enfr-1024"), output_bias=True)
    """

    def __init__(self, backbone, output_bias=False, lm_head=None, **kwargs):
        super().__init__(backbone, **kwargs)
        self.output_bias = bool(output_bias)
        self.lm_head = None
        if lm_head is not None and not self.output_bias:
            raise ValueError("`lm_head` continues XLM's output layer: pass output_bias=True "
                             "with it.")
        if self.output_bias:
            self.lm_head = MaskedLMHead(token_embedding=backbone.token_embedding,
                                        transform=False, dtype=backbone.dtype_policy,
                                        name="lm_head")
        if lm_head is not None:
            checkpoint_head_settings(lm_head, backbone.token_embedding, head_transform=False)
            load_head_weights(self.lm_head, lm_head, (None, None, sequence_width(backbone)))

    def _logits(self, hidden):
        return self.backbone.logits(hidden) if self.lm_head is None else self.lm_head(hidden)

    def call(self, inputs, training=False):
        hidden = self.backbone(backbone_inputs(self.backbone, inputs),
                               training=training)["sequence_output"]
        return self._logits(hidden)

    def predictions(self, batch, training):
        inputs, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
        hidden = self.backbone(backbone_inputs(self.backbone, inputs),
                               training=training)["sequence_output"]
        # The last position predicts nothing: drop it before the vocabulary projection.
        logits = self._logits(hidden[:, :-1])
        return (logits, *next_token_targets(inputs))

    def generate(self, token_ids, padding_mask=None, max_length=None, language_id=None,
                 **kwargs):
        """See `keras_ctx.generation.generate`; XLM's CLM decodes with this pretrainer's
        output layer (its bias) and `language_id` (`generation.causal_decoder`)."""
        decoder = generation.causal_decoder(self.backbone, self.lm_head, language_id)
        return generation.generate(decoder, token_ids, padding_mask,
                                   max_length=max_length, **kwargs)

    def get_config(self):
        config = super().get_config()
        config["output_bias"] = self.output_bias
        return config
