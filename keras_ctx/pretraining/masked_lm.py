"""Masked LM pretraining, with next sentence prediction (BERT) or sentence order (ALBERT).

    L = L_MLM + L_pair
    L_MLM  = sum_p w_p CE(y_p, softmax(head(h_p))) / sum_p w_p   (selected positions only)
    L_pair = CE(label, softmax(W pooled))                          (NSP or SOP; none for RoBERTa)

The objective is generic over the backbone: any model taking `token_ids`,
`padding_mask` (and optionally `segment_ids`), returning `sequence_output`
and `pooled_output`, and exposing `token_embedding` (the MLM output layer is
tied to it). Batches are dicts made by `keras_ctx.data` (see
`keras_ctx.data.pipelines`): the backbone inputs plus `mask_positions`,
`mask_ids`, `mask_weights` and, for NSP / SOP, `next_sentence_labels` /
`sentence_order_labels`. Compile with `jit_compile=True`.

References: Devlin et al. 2019 (BERT); Liu et al. 2019 (RoBERTa);
Lan et al. 2020 (ALBERT).
"""

import keras
from keras import ops

from keras_ctx.layers.gather import gather_positions
from keras_ctx.layers.heads import MaskedLMHead, SentencePairHead
from keras_ctx.pretraining.base import HeadsPretrainer

SENTENCE_OBJECTIVES = {None: None, "nsp": "next_sentence_labels",
                       "sop": "sentence_order_labels"}


def backbone_inputs(backbone, batch):
    """The backbone's own inputs from a batch dict; zeros for absent `segment_ids`."""
    names = list(backbone.input.keys()) if isinstance(backbone.input, dict) else [
        "token_ids", "padding_mask"]
    inputs = {}
    for name in names:
        if name in batch:
            inputs[name] = batch[name]
        elif name == "segment_ids":
            inputs[name] = ops.zeros_like(batch["token_ids"])
        else:
            raise ValueError(f"The batch has no {name!r}, which the backbone needs.")
    length = batch["token_ids"].shape[1]
    limit = getattr(backbone, "max_sequence_length", None)
    if isinstance(length, int) and limit is not None and length > limit:
        raise ValueError(
            f"Batches of {length} tokens are longer than the backbone's max_sequence_length "
            f"({limit}); make the pipeline's sequence_length <= {limit}."
        )
    return inputs


def sequence_rows(backbone, inputs, positions, training=None, sparse=True):
    """The backbone's `sequence_output` at `positions`: (batch, P, hidden).

    With `sparse`, keras_ctx backbones go through `Backbone.sequence_output_at`
    (last layer at these rows only where they can); any other model runs in full.
    """
    if sparse and hasattr(backbone, "sequence_output_at"):
        return backbone.sequence_output_at(inputs, positions, training=training)
    return gather_positions(backbone(inputs, training=training)["sequence_output"], positions)


def checkpoint_head_settings(mlm_head, token_embedding, head_transform=None):
    """(transform, activation, layer_norm_epsilon) of a head that continues `mlm_head`.

    Args:
        mlm_head: a checkpoint's `MaskedLMHead`, e.g. from
            `keras_ctx.convert.heads.masked_lm_from_huggingface`.
        token_embedding: the table the new head reads; must be the one `mlm_head` reads.
        head_transform: the caller's `head_transform` argument (None: the checkpoint's).

    Returns:
        The checkpoint head's settings; raises ValueError where they conflict.
    """
    if mlm_head.token_embedding is not token_embedding:
        raise ValueError("`mlm_head` is not tied to this backbone's token embedding; pass the "
                         "head read with this backbone (masked_lm_from_huggingface gives both).")
    if head_transform is not None and bool(head_transform) != mlm_head.transform:
        raise ValueError(f"head_transform={head_transform} but `mlm_head` has transform="
                         f"{mlm_head.transform}; leave head_transform out.")
    return mlm_head.transform, mlm_head.activation, mlm_head.layer_norm_epsilon


def load_head_weights(head, mlm_head, inputs_shape):
    """Builds `head` for `inputs_shape` and copies `mlm_head`'s own weights into it."""
    if not head.built:
        head.build(inputs_shape)
    for mine, theirs in zip(head.own_weights, mlm_head.own_weights, strict=True):
        if tuple(mine.shape) != tuple(theirs.shape):
            raise ValueError(f"`mlm_head`'s {theirs.path} is {tuple(theirs.shape)}, this "
                             f"backbone's head needs {tuple(mine.shape)}.")
        mine.assign(ops.copy(theirs))  # not `theirs`' buffer: a JAX step donates it


def sequence_width(backbone):
    """The width of `backbone`'s `sequence_output` (what a head on it reads)."""
    output = backbone.output
    if not isinstance(output, dict) or "sequence_output" not in output:
        raise ValueError(f"{backbone.name!r} must return a dict with `sequence_output`, as "
                         "every keras_ctx backbone does.")
    return output["sequence_output"].shape[-1]


@keras.saving.register_keras_serializable(package="keras_ctx")
class MaskedLMPretrainer(HeadsPretrainer):
    """Masked LM, plus NSP (`sentence_objective="nsp"`) or SOP (`"sop"`).

    Args:
        backbone: any backbone of the interface above (BertBackbone,
            AlbertBackbone, an ELECTRA generator, ...).
        sentence_objective: None (RoBERTa), "nsp" (BERT) or "sop" (ALBERT).
        sparse_last_layer: compute the backbone's last layer only at the
            masked positions (and [CLS] for NSP / SOP), which is all the
            objective reads (`Backbone.sequence_output_at`): the same losses
            and gradients without ~70% of the last layer's work (15% masked).
            Backbones that cannot do it compute every position.
        head_transform: whether the MLM head has BERT's dense + LayerNorm
            transform; False gives XLM's `PredLayer` (tied output + bias
            alone). Default: the backbone's `mlm_head_transform` if it has
            one, else True.
        mlm_head: a checkpoint's `MaskedLMHead` to continue from (its transform,
            LayerNorm and output bias are copied into this pretrainer's head, whose
            settings follow it), tied to `backbone.token_embedding`: e.g.
            `backbone, mlm_head = keras_ctx.convert.heads.masked_lm_from_huggingface(d)`.
            None: a fresh head.

    Call: a batch dict -> {"mlm": (batch, P, V) logits[, "nsp"/"sop": (batch, 2)]}.
    Metrics: loss, mlm_loss, mlm_accuracy[, nsp_loss, nsp_accuracy / sop_...].

    Example:
    >>> pretrainer = keras_ctx.pretraining.BertPretrainer(backbone)
    >>> pretrainer.compile(optimizer=keras.optimizers.AdamW(1e-4), jit_compile=True)
    >>> pretrainer.fit(keras_ctx.data.pipelines.bert_dataset(...), epochs=1)
    """

    def __init__(self, backbone, sentence_objective=None, sparse_last_layer=True,
                 head_transform=None, mlm_head=None, **kwargs):
        if sentence_objective not in SENTENCE_OBJECTIVES:
            raise ValueError(
                f"`sentence_objective` must be None, 'nsp' or 'sop', got {sentence_objective!r}.")
        super().__init__(**kwargs)
        self.backbone = backbone
        self.sentence_objective = sentence_objective
        self.sparse_last_layer = bool(sparse_last_layer)
        epsilon = getattr(backbone, "layer_norm_epsilon", 1e-12)
        activation = getattr(backbone, "activation", "gelu")
        if mlm_head is not None:
            head_transform, activation, epsilon = checkpoint_head_settings(
                mlm_head, backbone.token_embedding, head_transform)
        if head_transform is None:
            head_transform = getattr(backbone, "mlm_head_transform", True)
        self.head_transform = bool(head_transform)
        self.mlm_head = MaskedLMHead(token_embedding=backbone.token_embedding,
                                     activation=activation, layer_norm_epsilon=epsilon,
                                     transform=self.head_transform,
                                     dtype=backbone.dtype_policy, name="mlm_head")
        if mlm_head is not None:
            load_head_weights(self.mlm_head, mlm_head, (None, None, sequence_width(backbone)))
        self.objectives = ("mlm",) + ((sentence_objective,) if sentence_objective else ())
        if sentence_objective:
            self.pair_head = SentencePairHead(2, dtype=backbone.dtype_policy,
                                              name=f"{sentence_objective}_head")
        self.make_objective_metrics()
        if not sentence_objective:  # nothing reads `pooled_output` (RoBERTa's pooler)
            self.reads_outputs("sequence_output")

    def _sparse(self):
        backbone = self.backbone
        return (self.sparse_last_layer and getattr(backbone, "supports_sequence_output_at", False)
                and (not self.sentence_objective or backbone.pools_first_position))

    def call(self, batch, training=False):
        inputs = backbone_inputs(self.backbone, batch)
        positions = batch["mask_positions"]
        if not self._sparse():
            outputs = self.backbone(inputs, training=training)
            logits = {"mlm": self.mlm_head(outputs["sequence_output"], mask_positions=positions)}
            if self.sentence_objective:
                logits[self.sentence_objective] = self.pair_head(outputs["pooled_output"])
            return logits
        if self.sentence_objective:  # [CLS] first, for the pooler
            positions = ops.concatenate([ops.zeros_like(positions[:, :1]), positions], axis=1)
        rows = sequence_rows(self.backbone, inputs, positions, training)
        if not self.sentence_objective:
            return {"mlm": self.mlm_head(rows)}
        pooled = self.backbone.pooled_output_from(rows[:, 0])
        return {"mlm": self.mlm_head(rows[:, 1:]),
                self.sentence_objective: self.pair_head(pooled)}

    def targets(self, batch):
        targets = {"mlm": (batch["mask_ids"], batch["mask_weights"])}
        if self.sentence_objective:
            targets[self.sentence_objective] = (
                batch[SENTENCE_OBJECTIVES[self.sentence_objective]], None)
        return targets

    def get_config(self):
        config = super().get_config()
        config["sentence_objective"] = self.sentence_objective
        config["sparse_last_layer"] = self.sparse_last_layer
        config["head_transform"] = self.head_transform
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class BertPretrainer(MaskedLMPretrainer):
    """BERT: masked LM + next sentence prediction (Devlin et al. 2019)."""

    def __init__(self, backbone, sentence_objective="nsp", **kwargs):
        super().__init__(backbone, sentence_objective=sentence_objective, **kwargs)


@keras.saving.register_keras_serializable(package="keras_ctx")
class RobertaPretrainer(MaskedLMPretrainer):
    """RoBERTa: masked LM only, fed dynamically masked packed sentences (Liu et al. 2019)."""

    def __init__(self, backbone, sentence_objective=None, **kwargs):
        super().__init__(backbone, sentence_objective=sentence_objective, **kwargs)


@keras.saving.register_keras_serializable(package="keras_ctx")
class AlbertPretrainer(MaskedLMPretrainer):
    """ALBERT: masked LM + sentence order prediction (Lan et al. 2020)."""

    def __init__(self, backbone, sentence_objective="sop", **kwargs):
        super().__init__(backbone, sentence_objective=sentence_objective, **kwargs)
