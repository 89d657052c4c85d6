"""SpanBERT pretraining: span masking + span boundary objective (Joshi et al. 2020).

    L(x_i) = L_MLM(x_i) + L_SBO(x_i)
           = -log P(x_i | h_i) - log P(x_i | y_i),  y_i = f(x_{s-1}, x_{e+1}, p_{i-s+1})

for every token x_i of a masked span (s, e); single contiguous segments, no
NSP. Batches come from `keras_ctx.data.span_masking.SpanMasker` (see
`keras_ctx.data.pipelines.spanbert_dataset`): backbone inputs, `mask_positions`,
`mask_ids`, `mask_weights`, `span_left_positions`, `span_right_positions`,
`span_offsets`. Both heads are tied to the backbone's input embeddings.
"""

import keras
from keras import ops

from keras_ctx.layers.heads import MaskedLMHead, SpanBoundaryHead
from keras_ctx.pretraining.base import HeadsPretrainer
from keras_ctx.pretraining.masked_lm import backbone_inputs, sequence_rows


@keras.saving.register_keras_serializable(package="keras_ctx")
class SpanBertPretrainer(HeadsPretrainer):
    """Masked LM + span boundary objective over any backbone.

    Args:
        backbone: a backbone with `token_embedding` (BertBackbone for SpanBERT).
        max_span_length: rows of the SBO relative position table, in tokens
            (spans are at most 10 words; longer offsets share the last row).
        sparse_last_layer: compute the backbone's last layer only at the rows
            the heads read (masked tokens and span boundaries); the same
            losses and gradients for less work (see `MaskedLMPretrainer`).

    Call: batch dict -> {"mlm": (batch, P, V), "sbo": (batch, P, V)} logits.
    Metrics: loss, mlm_loss, mlm_accuracy, sbo_loss, sbo_accuracy.
    """

    objectives = ("mlm", "sbo")

    def __init__(self, backbone, max_span_length=32, sparse_last_layer=True, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.max_span_length = max_span_length
        self.sparse_last_layer = bool(sparse_last_layer)
        epsilon = getattr(backbone, "layer_norm_epsilon", 1e-12)
        self.mlm_head = MaskedLMHead(token_embedding=backbone.token_embedding,
                                     layer_norm_epsilon=epsilon,
                                     dtype=backbone.dtype_policy, name="mlm_head")
        self.sbo_head = SpanBoundaryHead(token_embedding=backbone.token_embedding,
                                         max_span_length=max_span_length,
                                         layer_norm_epsilon=epsilon,
                                         dtype=backbone.dtype_policy, name="sbo_head")
        self.make_objective_metrics()
        self.reads_outputs("sequence_output")  # not `pooled_output` (a pooler, if any)

    def call(self, batch, training=False):
        # The rows both heads read: masked tokens, then left and right boundaries.
        masked, left, right = (batch["mask_positions"], batch["span_left_positions"],
                               batch["span_right_positions"])
        rows = sequence_rows(self.backbone, backbone_inputs(self.backbone, batch),
                             ops.concatenate([masked, left, right], axis=1), training,
                             sparse=self.sparse_last_layer)
        count = ops.shape(masked)[1]
        index = ops.broadcast_to(ops.arange(count, dtype="int32")[None], ops.shape(masked))
        return {
            "mlm": self.mlm_head(rows[:, :count]),
            "sbo": self.sbo_head(rows, index + count, index + 2 * count, batch["span_offsets"]),
        }

    def targets(self, batch):
        target = (batch["mask_ids"], batch["mask_weights"])
        return {"mlm": target, "sbo": target}

    def get_config(self):
        config = super().get_config()
        config["max_span_length"] = self.max_span_length
        config["sparse_last_layer"] = self.sparse_last_layer
        return config
