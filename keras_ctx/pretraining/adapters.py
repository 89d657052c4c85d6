"""MAD-X's language-adapter objective: masked LM with the invertible adapters' inverse
before the output embeddings (Pfeiffer et al. 2020)."""

import keras

from keras_ctx.layers.adapter_sites import encoder_stacks
from keras_ctx.pretraining.masked_lm import (
    MaskedLMPretrainer,
    backbone_inputs,
    sequence_rows,
)


def invert_output(model, sequence_output):
    """The active invertible adapters' inverse, to apply before an output embedding (MAD-X)."""
    for stack in encoder_stacks(model):
        slot = getattr(stack, "input_adapters", None)
        if slot is not None:
            sequence_output = slot.inverse(sequence_output)
    return sequence_output


@keras.saving.register_keras_serializable(package="keras_ctx")
class AdapterMaskedLMPretrainer(MaskedLMPretrainer):
    """Masked LM with the invertible adapters' inverse before the output embeddings (MAD-X).

    MAD-X trains a language adapter and its invertible adapter with MLM on
    that language, the backbone frozen: `train_only(pretrainer, adapters=[name])`.
    Without invertible adapters it is `MaskedLMPretrainer(sentence_objective=None)`.

    Which head weights train is explicit (`train_head`): Pfeiffer et al. 2020
    train the language adapters by MLM with the pretrained model's weights
    fixed, so a head from a checkpoint stays frozen by default; a fresh head
    has nothing pretrained in it and trains with the adapter (else its random
    transform and zero bias would stay). The output table is the backbone's
    token embedding: frozen either way. (adapter-hub's `freeze_model` freezes
    only the base model, so its run_mlm also trains a checkpoint head's
    transform and bias: `train_head=True` does that.)

    Args:
        backbone: the backbone with the language adapter.
        mlm_head: the checkpoint's MaskedLMHead, tied to `backbone.token_embedding`
            (e.g. `keras_ctx.convert.heads.masked_lm_from_huggingface`); its
            weights are copied into this pretrainer's head. None: a fresh head.
        train_head: whether `train_only` keeps the head's own weights (transform,
            output bias) trainable. Default: True for a fresh head, False for
            `mlm_head`.
        **kwargs: as for `MaskedLMPretrainer` (no sentence objective).
    """

    def __init__(self, backbone, mlm_head=None, train_head=None, **kwargs):
        kwargs.pop("sentence_objective", None)
        super().__init__(backbone, sentence_objective=None, mlm_head=mlm_head, **kwargs)
        self.train_head = mlm_head is None if train_head is None else bool(train_head)
        # Built now, so that `train_only` (called before the first step) sees its weights.
        if not self.mlm_head.built:
            self.mlm_head.build((None, None, backbone.hidden_size))

    @property
    def trained_with_adapters(self):
        """Variables `train_only` keeps trainable beside the adapters: a trained head's."""
        return self.mlm_head.own_weights if self.train_head else []

    def get_config(self):
        return dict(super().get_config(), train_head=self.train_head)

    def call(self, batch, training=False):
        inputs = backbone_inputs(self.backbone, batch)
        rows = sequence_rows(self.backbone, inputs, batch["mask_positions"], training,
                             sparse=self.sparse_last_layer)
        head = self.mlm_head
        if not head.built:
            head.build(rows.shape)
        # adapter-hub's masked-LM head: its transform (none for XLM's), then the
        # inverse, then the (tied) output embeddings and bias.
        hidden = invert_output(self.backbone, head.transformed(rows))
        logits = head.token_embedding.reverse(hidden)
        return {"mlm": logits + keras.ops.cast(head.output_bias, logits.dtype)}
