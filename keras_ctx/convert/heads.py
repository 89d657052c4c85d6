"""Heads of Hugging Face checkpoints: masked LM and XLNet's LM, and every objective head a
pretraining checkpoint holds.

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

Pretraining heads:

`with_pretraining_heads(directory)` returns `(backbone, {role: arrays})`: every
head of the objective the checkpoint holds, as a run keeps them
(`keras_ctx.runs.HEAD_FILE`, which `pretrain --from` continues): the masked-LM
head above (role "output") and the family's `HuggingFace.heads`, each a
`HeadLayout`:

    bert     cls.seq_relationship                        NSP ("pair"; BertForPreTraining)
    albert   sop_classifier.classifier                   SOP ("pair"; AlbertForPreTraining)
    electra  discriminator_predictions.dense /           replaced-token detection
             .dense_prediction                           ("replaced_token"; ElectraForPreTraining)

A google-research TF checkpoint's heads go through the same layouts, their
variables renamed by the family's `TFLayout.heads`
(`keras_ctx.convert.tensorflow.from_tf_checkpoint(heads=True)`).
"""

import dataclasses
import warnings
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
from keras_ctx.run_files import HEAD_ROLES, OUTPUT_HEAD

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


@dataclasses.dataclass(frozen=True)
class HeadLayout:
    """Where a pretraining checkpoint keeps one more head of its objective, beside its
    masked-LM head (a family's `HuggingFace.heads`).

    Args:
        role: the objective's head it continues (`keras_ctx.runs.HEAD_ROLES`: "pair" for
            NSP / SOP, "replaced_token" for ELECTRA's discriminator head).
        tensors: (Hugging Face name, `keras_ctx.convert.mapping` Transform) of each of the
            head's weights, in the order keras_ctx's head keeps them
            (`keras_ctx.pretraining.kept_head.own_weights`): a torch Linear's (out, in)
            weight is `LINEAR`, a bias the identity.
    """

    role: str
    tensors: tuple

    def __post_init__(self):
        if self.role not in HEAD_ROLES:
            raise ValueError(f"HeadLayout role {self.role!r}; the roles are "
                             f"{', '.join(HEAD_ROLES)}.")


def _complete(names, read, role, source):
    """Whether the checkpoint holds every tensor of a head (`names`); one that holds some
    of them only is not kept, with a warning naming the first one missing."""
    missing = [name for name in names if not read.has(name)]
    if missing and len(missing) < len(names):
        warnings.warn(f"{source} holds part of its {role.replace('_', ' ')} head but not "
                      f"{missing[0]!r}: that head is not kept (it starts new where it is "
                      "trained).", stacklevel=3)
    return not missing


def layout_heads(layouts, tensors, source):
    """{role: arrays} of each `HeadLayout` whose tensors `tensors` holds (a head whose
    tensors it holds in part is left out, with a warning)."""
    read, found = TensorReader(tensors), {}
    for layout in layouts:
        if _complete([name for name, _ in layout.tensors], read, layout.role, source):
            found[layout.role] = [np.ascontiguousarray(transform.to_ours(read(name)))
                                  for name, transform in layout.tensors]
    return found


def pretraining_heads(backbone, config, tensors, source):
    """{role: that head's own arrays} of every objective head a checkpoint's Hugging
    Face-named `tensors` hold (its config's family: the masked-LM head as "output", then
    its `HuggingFace.heads`); {} for a bare model. `backbone` is the one converted from
    them (the masked-LM head is tied to its token embedding)."""
    from keras import ops

    spec = _huggingface(config.get("model_type"))
    if spec is None:
        return {}
    found, layout = {}, spec.masked_lm
    if layout is not None and _complete(_masked_lm_names(layout), TensorReader(tensors),
                                        OUTPUT_HEAD, source):
        head = _masked_lm_head(backbone, config, tensors, layout)
        found[OUTPUT_HEAD] = [ops.convert_to_numpy(v) for v in head.own_weights]
    found.update(layout_heads(spec.heads, tensors, source))
    return found


def _masked_lm_names(layout):
    """The tensors a masked-LM head is read from (its tied decoder aside)."""
    return [layout.bias] + ([] if layout.dense is None else [
        layout.dense + ".weight", layout.dense + ".bias", layout.norm + ".weight",
        layout.norm + ".bias"])


def with_pretraining_heads(directory):
    """(backbone, {role: arrays}) of a Hugging Face checkpoint directory: every head of its
    pretraining objective it holds (`pretraining_heads`), as a run keeps them."""
    backbone = from_huggingface(directory)
    return backbone, pretraining_heads(backbone, read_config(directory),
                                       read_tensors(directory), directory)


def checkpoint_heads(directory, backbone, format):
    """{role: arrays} of the pretraining heads a checkpoint directory holds for `backbone`,
    the backbone read from it: a Hugging Face one's (`pretraining_heads`), a
    google-research TF one's (`TFLayout.heads`); {} for the other formats (a keras-hub
    preset and ELMo's allennlp files hold none)."""
    if format == "huggingface":
        return pretraining_heads(backbone, read_config(directory), read_tensors(directory),
                                 directory)
    if format == "tensorflow":
        from keras_ctx.convert.tensorflow import tf_checkpoint_heads

        return tf_checkpoint_heads(directory, backbone)
    return {}


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
    config = read_config(directory)
    model_type = config.get("model_type")
    layout = masked_lm_layout(model_type)
    if layout is None:
        raise CheckpointError(f"No masked-LM head converter for model_type {model_type!r}; "
                              f"supported: {', '.join(_with_masked_lm())}.")
    _check_output_layer(config)
    backbone = from_huggingface(directory)
    tensors = read_tensors(directory)
    if not TensorReader(tensors).has(layout.bias):
        raise CheckpointError(f"The checkpoint has no {layout.bias!r}: it has no masked-LM "
                              f"head (its architectures: {config.get('architectures')}).")
    return backbone, _masked_lm_head(backbone, config, tensors, layout)


def _check_output_layer(config):
    if config.get("asm"):
        raise CheckpointError("XLM checkpoints with an adaptive softmax output (asm=True) are "
                              "not supported; only the tied pred_layer.proj is.")


def _masked_lm_head(backbone, config, tensors, layout):
    """The `MaskedLMHead` `layout` describes in `tensors`, tied to `backbone`'s table."""
    from keras_ctx.layers.heads import MaskedLMHead

    _check_output_layer(config)
    read, dense, decoder = TensorReader(tensors), layout.dense, layout.decoder
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
    return head


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
