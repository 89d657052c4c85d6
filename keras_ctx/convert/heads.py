"""Heads of Hugging Face checkpoints: masked LM and XLNet's LM.

The causal and seq2seq LM heads live in the backbones, so `from_huggingface`
alone gives a model that generates: GPT-2 / GPT (`lm_head` tied to `wte`),
T5 (tied `shared` after a d_model^-0.5 rescale, or v1.1 / mT5's untied
`lm_head`) and BART (tied `shared` + `final_logits_bias`) are read into
`backbone.logits(hidden)`.

Classification heads are tasks' (`keras_ctx.tasks.classifier_from_huggingface`,
above the models: the converters' machinery imports no model).

Masked LM:

`masked_lm_from_huggingface(directory)` returns `(backbone, head)`: the
backbone as `from_huggingface` builds it and a `MaskedLMHead` tied to its
token embedding, with the checkpoint's transform, LayerNorm and output bias
(the decoder weight of these checkpoints is the tied word embedding):

    bert     cls.predictions.transform.dense / .transform.LayerNorm / .bias
    roberta  lm_head.dense / lm_head.layer_norm / lm_head.bias
    albert   predictions.dense / predictions.LayerNorm / predictions.bias   (H -> E)
    electra  generator_predictions.dense / .LayerNorm / generator_lm_head.bias (generator)
    xlm      pred_layer.proj.bias only: XLM's PredLayer has no transform
             (`MaskedLMHead(transform=False)`; asm=True checkpoints are not supported)
    xlnet    lm_loss.bias only: XLNetLMHeadModel's logits = h E^T + b
             (`MaskedLMHead(transform=False)` on the tied word embedding)

`logits = head(outputs["sequence_output"])`.
`masked_lm_to_huggingface(backbone, head, directory)` writes the pair back in
the head model's layout (the backbone under its prefix, the head's tensors;
the tied decoder weight left out, as HF saves it).
"""

import dataclasses
from typing import Optional

import numpy as np

from keras_ctx import registry
from keras_ctx.convert.base import CheckpointError, TensorReader
from keras_ctx.convert.huggingface import (
    activation_from_huggingface,
    from_huggingface,
    read_config,
    read_tensors,
)
from keras_ctx.convert.huggingface_export import default_model_type, write_checkpoint_directory
from keras_ctx.convert.mapping import Entry, LINEAR, export_weight_map, load_weight_map

@dataclasses.dataclass(frozen=True)
class MaskedLMLayout:
    """Where a *ForMaskedLM checkpoint keeps its head (a family's `HuggingFace.masked_lm`).

    Args:
        architecture: the head model's class, written to config.json.
        prefix: the backbone's tensor-name prefix inside it ("bert.").
        bias: the output bias.
        decoder: the (tied) output weight, checked against the word embeddings.
        dense, norm: the transform's Linear and LayerNorm prefixes; None: no
            transform (XLM's PredLayer, XLNet's lm_loss).
        activation: the transform's activation when config.json's hidden_act
            is not it (RoBERTa's and ELECTRA's heads use GELU).
    """

    architecture: str
    prefix: str
    bias: str
    decoder: str
    dense: Optional[str] = None
    norm: Optional[str] = None
    activation: Optional[str] = None


def masked_lm_layout(model_type):
    """The `MaskedLMLayout` of a model_type, or None (no masked-LM head is read)."""
    found = registry.huggingface(model_type)
    return found[1].masked_lm if found else None


def _with_masked_lm():
    return [t for t in registry.huggingface_model_types() if masked_lm_layout(t) is not None]


def _huggingface(model_type):
    found = registry.huggingface(model_type)
    return found[1] if found else None


def _head_entries(head, layout):
    entries = [Entry(head.output_bias, layout.bias)]
    if layout.dense is not None:
        entries += [Entry(head.dense.kernel, layout.dense + ".weight", LINEAR),
                    Entry(head.dense.bias, layout.dense + ".bias"),
                    Entry(head.layer_norm.gamma, layout.norm + ".weight"),
                    Entry(head.layer_norm.beta, layout.norm + ".bias")]
    return entries


def with_masked_lm_head(directory):
    """(backbone, MaskedLMHead or None) of a Hugging Face checkpoint directory: its head where
    it holds one (its family's layout, whose output bias is among its tensors: BertForMaskedLM,
    XLMWithLMHeadModel), else None (a bare model, a classifier)."""
    layout = masked_lm_layout(read_config(directory).get("model_type"))
    if layout is not None and layout.bias in read_tensors(directory):
        return masked_lm_from_huggingface(directory)
    return from_huggingface(directory), None


def masked_lm_from_huggingface(directory):
    """(backbone, MaskedLMHead) of a *ForMaskedLM / *ForPreTraining / XLNetLMHeadModel
    checkpoint directory."""
    from keras_ctx.layers.heads import MaskedLMHead

    config = read_config(directory)
    model_type = config.get("model_type")
    layout = masked_lm_layout(model_type)
    if layout is None:
        raise CheckpointError(f"No masked-LM head converter for model_type {model_type!r}; "
                              f"supported: {', '.join(_with_masked_lm())}.")
    dense, bias, decoder = layout.dense, layout.bias, layout.decoder
    if config.get("asm"):
        raise CheckpointError("XLM checkpoints with an adaptive softmax output (asm=True) are "
                              "not supported; only the tied pred_layer.proj is.")
    backbone = from_huggingface(directory)
    tensors = read_tensors(directory)
    read = TensorReader(tensors)
    if not read.has(bias):
        raise CheckpointError(f"The checkpoint has no {bias!r}: it has no masked-LM head "
                              f"(its architectures: {config.get('architectures')}).")
    if read.has(decoder):
        table = np.asarray(backbone.token_embedding.embeddings.numpy())
        if read(decoder).shape != table.shape or not np.allclose(read(decoder), table):
            raise CheckpointError(f"{decoder} is not tied to the word embeddings; an untied "
                                  "output layer is not supported.")
    activation = activation_from_huggingface(layout.activation
                                             or config.get("hidden_act", "gelu"))
    head = MaskedLMHead(token_embedding=backbone.token_embedding, activation=activation,
                        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
                        transform=dense is not None, name="masked_lm_head")
    hidden = (config.get("hidden_size") or config.get("emb_dim") or config.get("d_model")
              or read(dense + ".weight").shape[1])
    head.build((None, None, hidden))
    load_weight_map(_head_entries(head, layout), read)
    return backbone, head


def masked_lm_to_huggingface(backbone, head, directory, model_type=None, overwrite=False):
    """Writes (backbone, MaskedLMHead) as the family's *ForMaskedLM / XLNetLMHeadModel.

    `overwrite`: replace the checkpoint files already in `directory` (as
    `to_huggingface`).

    `masked_lm_from_huggingface(directory)` reads it back exactly.
    """
    model_type = model_type or default_model_type(backbone)
    spec = _huggingface(model_type)
    if spec is None or spec.masked_lm is None or spec.export is None:
        raise CheckpointError(f"No masked-LM head export for model_type {model_type!r}; "
                              f"supported: {', '.join(_with_masked_lm())}.")
    layout = spec.masked_lm
    if head.token_embedding is not backbone.token_embedding:
        raise CheckpointError("The head is not tied to this backbone's token embedding; "
                              f"{layout.architecture} ties its output layer.")
    config, tensors = spec.export(backbone)
    tensors = {layout.prefix + name: value for name, value in tensors.items()}
    tensors.update(export_weight_map(_head_entries(head, layout)))
    config = dict(config, architectures=[layout.architecture])
    return write_checkpoint_directory(directory, config, tensors,
                                      getattr(backbone, "tokenizer", None), overwrite=overwrite)
