"""Hugging Face GPT-2 (model_type "gpt2") and GPT ("openai-gpt") checkpoints <-> GPTBackbone.

GPT-2's checkpoint keeps OpenAI's `Conv1D` layout: weights are (in, out),
i.e. already Keras kernels, and each layer's query/key/value projections are
one fused `attn.c_attn` (d, 3d) tensor whose columns are [q | k | v]. The
converter splits it into three virtual tensors `...c_attn.weight[q]` etc.
(and the exporter joins them back). The causal-mask buffers `attn.bias` /
`attn.masked_bias` of older checkpoints are skipped; `lm_head.weight`
(GPT2LMHeadModel, OpenAIGPTLMHeadModel) is tied to the token embedding, which
`GPTBackbone.logits` reads: a stored copy must equal it. The exporter writes
the *LMHeadModel architecture, without the tied copy (as HF saves it).

GPT and GPT-2 use GELU's tanh approximation ("gelu_new"), passed to
GPTBackbone as `activation="gelu_approximate"`.
"""


import functools

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class, required
from keras_ctx.convert.huggingface import (
    CheckpointError,
    activation_from_huggingface,
    activation_to_huggingface,
    check_tied_copy,
    mapped_converter,
)
from keras_ctx.convert.kerashub import keras_hub_block_entries
from keras_ctx.convert.mapping import (
    Entry,
    HeadsBias,
    SplitHeadsIn,
    SplitHeadsOut,
    export_weight_map,
    norm_entries,
)
from keras_ctx.models.gpt.backbone import GPTBackbone
from keras_ctx.registry import HuggingFace, KerasHub

GPT2_IGNORED = (r"h\.\d+\.attn\.(bias|masked_bias)", r"lm_head\.weight", r"score\.(weight|bias)",
                r"multiple_choice_head\..+")
_PARTS = ("q", "k", "v")


def _split_fused(tensors):
    """c_attn.weight (d, 3d) / bias (3d,) -> [q], [k], [v] virtual tensors."""
    tensors = dict(tensors)
    for name in [n for n in tensors if n.endswith(".attn.c_attn.weight")
                 or n.endswith(".attn.c_attn.bias")]:
        value = tensors.pop(name)
        if value.shape[-1] % 3:
            raise CheckpointError(f"{name}: shape {value.shape} is not three fused "
                                  "projections (last axis not divisible by 3).")
        for part, piece in zip(_PARTS, np.split(value, 3, axis=-1)):
            tensors[f"{name}[{part}]"] = piece
    return tensors


def _join_fused(tensors):
    joined = {}
    for name, value in tensors.items():
        if name.endswith("[q]"):
            base = name[:-3]
            joined[base] = np.concatenate([tensors[f"{base}[{p}]"] for p in _PARTS], axis=-1)
        elif not name.endswith(("[k]", "[v]")):
            joined[name] = value
    return joined


def gpt2_config_from_huggingface(config, original_gpt=False):
    required(config, "vocab_size", "n_embd", "n_layer", "n_head")
    hidden = config["n_embd"]
    settings = dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["n_layer"],
        num_heads=config["n_head"],
        hidden_size=hidden,
        intermediate_size=config.get("n_inner") or 4 * hidden,
        max_sequence_length=config.get("n_positions", 1024),
        dropout=config.get("resid_pdrop", 0.1),
        normalize_first=not original_gpt,
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
    )
    # HF's OpenAIGPT maps its afn "gelu" to the tanh approximation (ACT_FNS).
    activation = ({"gelu": "gelu_new"}.get(config.get("afn", "gelu"), config.get("afn"))
                  if original_gpt else config.get("activation_function", "gelu_new"))
    settings["activation"] = activation_from_huggingface(
        activation, "afn" if original_gpt else "activation_function")
    return settings


def gpt2_weight_map(backbone, original_gpt=False):
    """[Entry] of a GPTBackbone in GPT-2 names (original GPT's with `original_gpt`).

    Query/key/value read virtual [q]/[k]/[v] tensors split from c_attn.
    """
    if (backbone.final_norm is None) != original_gpt:
        raise CheckpointError(
            "GPT-2 checkpoints are pre-LN (normalize_first=True) and the original GPT's "
            f"post-LN; this GPTBackbone has normalize_first={backbone.final_norm is not None}.")
    c = backbone.get_config()
    if ("local" in backbone.attention_types or c.get("attention_scale") is not None
            or not c.get("use_qkv_bias", True)
            or backbone.head_size * backbone.num_heads != backbone.hidden_size):
        raise CheckpointError(
            "GPT-2/GPT checkpoints have dense, 1/sqrt(d)-scaled attention with q/k/v biases "
            "and head_size = hidden / heads; this GPTBackbone differs (banded layers, "
            "attention_scale, use_qkv_bias or head_size). GPT-Neo-shaped backbones (unscaled, "
            "no q/k/v biases) export as model_type='gpt_neo'.")
    heads = backbone.num_heads
    token, position = ("tokens_embed", "positions_embed") if original_gpt else ("wte", "wpe")
    entries = [Entry(backbone.token_embedding.embeddings, token + ".weight"),
               Entry(backbone.position_embedding.position_embeddings, position + ".weight")]
    for i, block in enumerate(backbone.blocks):
        p, attention = f"h.{i}.", block.self_attention
        for part, dense in zip(_PARTS, (attention.query_dense, attention.key_dense,
                                        attention.value_dense)):
            entries += [
                Entry(dense.kernel, f"{p}attn.c_attn.weight[{part}]", SplitHeadsIn(heads)),
                Entry(dense.bias, f"{p}attn.c_attn.bias[{part}]", HeadsBias(heads)),
            ]
        entries += [Entry(attention.output_dense.kernel, p + "attn.c_proj.weight",
                          SplitHeadsOut(heads)),
                    Entry(attention.output_dense.bias, p + "attn.c_proj.bias")]
        entries += norm_entries(block.self_attention_norm, p + "ln_1")
        entries += norm_entries(block.feedforward_norm, p + "ln_2")
        ffn = block.feedforward
        entries += [Entry(ffn.intermediate_dense.kernel, p + "mlp.c_fc.weight"),
                    Entry(ffn.intermediate_dense.bias, p + "mlp.c_fc.bias"),
                    Entry(ffn.output_dense.kernel, p + "mlp.c_proj.weight"),
                    Entry(ffn.output_dense.bias, p + "mlp.c_proj.bias")]
    if not original_gpt:
        entries += norm_entries(backbone.final_norm, "ln_f")
    return entries


def _gpt_converter(original_gpt):
    """GPT-2's layout, or the original GPT's (Radford et al. 2018): post-LN, no final
    norm, names tokens_embed..."""
    def prepare(tensors, backbone):
        token = "tokens_embed.weight" if original_gpt else "wte.weight"
        table = "transformer." + token if "transformer." + token in tensors else token
        if table in tensors:
            check_tied_copy(tensors, "lm_head.weight", table,
                            "GPT and GPT-2 tie their output layer to the token embedding")
        return _split_fused(tensors)

    return mapped_converter(
        GPTBackbone, functools.partial(gpt2_config_from_huggingface, original_gpt=original_gpt),
        functools.partial(gpt2_weight_map, original_gpt=original_gpt),
        config_fields.OPENAI_GPT if original_gpt else config_fields.GPT2,
        prefixes=("transformer.", ""), ignore=GPT2_IGNORED, prepare=prepare)


convert_gpt2 = _gpt_converter(original_gpt=False)
convert_openai_gpt = _gpt_converter(original_gpt=True)


def export_gpt2(backbone):
    check_class(backbone, "GPTBackbone", "gpt2")
    c = backbone.get_config()
    block = backbone.blocks[0]
    activation = getattr(block, "activation", "gelu")
    config = {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "vocab_size": c["vocabulary_size"], "n_embd": c["hidden_size"],
        "n_layer": c["num_layers"], "n_head": c["num_heads"],
        "n_inner": c["intermediate_size"], "n_positions": c["max_sequence_length"],
        "resid_pdrop": c["dropout"], "embd_pdrop": c["dropout"], "attn_pdrop": c["dropout"],
        "layer_norm_epsilon": c["layer_norm_epsilon"],
        "activation_function": activation_to_huggingface(activation),
    }
    return config, _join_fused(export_weight_map(gpt2_weight_map(backbone)))


def export_openai_gpt(backbone):
    check_class(backbone, "GPTBackbone", "openai-gpt")
    c = backbone.get_config()
    config = {
        "model_type": "openai-gpt", "architectures": ["OpenAIGPTLMHeadModel"],
        "vocab_size": c["vocabulary_size"], "n_embd": c["hidden_size"],
        "n_layer": c["num_layers"], "n_head": c["num_heads"],
        "n_positions": c["max_sequence_length"], "resid_pdrop": c["dropout"],
        "embd_pdrop": c["dropout"], "attn_pdrop": c["dropout"],
        "layer_norm_epsilon": c["layer_norm_epsilon"], "afn": "gelu",
    }
    if c["intermediate_size"] != 4 * c["hidden_size"]:
        raise CheckpointError("HF's OpenAIGPT has a 4 * n_embd feed-forward; this backbone's "
                              f"intermediate_size is {c['intermediate_size']}.")
    return config, _join_fused(export_weight_map(gpt2_weight_map(backbone, original_gpt=True)))


def gpt2_from_keras_hub(source, c):
    """keras-hub's GPT2Backbone -> ours (tanh GELU, as GPTBackbone's GPT-2)."""
    settings = dict(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                    num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                    intermediate_size=c["intermediate_dim"],
                    max_sequence_length=c["max_sequence_length"], dropout=c["dropout"],
                    normalize_first=True, layer_norm_epsilon=1e-5,
                    activation="gelu_approximate")
    ours = GPTBackbone(**settings)
    entries = [Entry(ours.token_embedding.embeddings, "token_embedding/embeddings"),
               Entry(ours.position_embedding.position_embeddings,
                     "position_embedding/embeddings"),
               Entry(ours.final_norm.gamma, "layer_norm/gamma"),
               Entry(ours.final_norm.beta, "layer_norm/beta")]
    for i, block in enumerate(ours.blocks):
        entries += keras_hub_block_entries(block, f"transformer_layer_{i}", "self_attention")
    return ours, entries


gpt2_from_keras_hub.config_fields = config_fields.KERAS_HUB_GPT2


# ---------------------------------------------------------------- the family's converter specs

OPENAI_GPT_HUGGINGFACE = (HuggingFace("openai-gpt", convert_openai_gpt, export_openai_gpt),)
GPT2_HUGGINGFACE = (HuggingFace("gpt2", convert_gpt2, export_gpt2),)
GPT2_KERAS_HUB = (KerasHub("GPT2Backbone", gpt2_from_keras_hub),)
