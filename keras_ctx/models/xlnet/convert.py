"""Hugging Face XLNet checkpoints (model_type "xlnet") <-> XLNetBackbone.

HF XLNet stores each layer's projections as (d_model, n_head, d_head)
tensors used in einsums, which are our EinsumDense kernels as they are,
except the output projection `o`, applied as "ibnd,hnd->ibh": our
(heads, size, d_model) kernel is its transpose (1, 2, 0). `mask_emb`
(1, 1, d_model) is the query stream's start `w`.
"""

import re

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class, required
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.convert.huggingface import (
    mapped_converter,
    CheckpointError,
    activation_from_huggingface,
    activation_to_huggingface,
)
from keras_ctx.convert.mapping import (
    Entry,
    Permute,
    Reshape,
    dense_entries,
    export_weight_map,
    norm_entries,
)
from keras_ctx.convert.tensorflow import SKIPPED, TFLayout
from keras_ctx.models.xlnet.backbone import XLNetBackbone
from keras_ctx.registry import HuggingFace, KerasHub

XLNET_IGNORED = (r"lm_loss\.(weight|bias)", r"sequence_summary\..+", r"logits_proj\..+",
                 r"qa_outputs\..+", r"start_logits\..+", r"end_logits\..+", r"answer_class\..+")


def xlnet_config_from_huggingface(config):
    required(config, "vocab_size", "n_layer", "n_head", "d_model", "d_inner")
    attention_type = config.get("attn_type", "bi")
    if attention_type not in ("bi", "uni"):
        raise CheckpointError(f"attn_type {attention_type!r}: XLNet has 'bi' and 'uni'.")
    if config.get("d_head") not in (None, config["d_model"] // config["n_head"]):
        raise CheckpointError(f"d_head {config['d_head']} != d_model / n_head.")
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["n_layer"],
        num_heads=config["n_head"],
        hidden_size=config["d_model"],
        intermediate_size=config["d_inner"],
        dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("dropout", 0.1),
        activation=activation_from_huggingface(config.get("ff_activation", "gelu"), "ff_activation"),
        mem_len=int(config.get("mem_len") or 0),
        clamp_length=config.get("clamp_len", -1),
        attention_type=attention_type,
        # HF, like XLNet's _create_mask, applies same_length to 'uni' attention only.
        same_length=bool(config.get("same_length")) and attention_type == "uni",
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        initializer_range=config.get("initializer_range", 0.02),
    )


def xlnet_weight_map(backbone):
    """[Entry] of an XLNetBackbone in HF names without "transformer."."""
    entries = [
        Entry(backbone.token_embedding.embeddings, "word_embedding.weight"),
        Entry(backbone.mask_embedding.mask_emb, "mask_emb", Reshape((1, 1, backbone.hidden_size))),
    ]
    for index, block in enumerate(backbone.blocks):
        p, attention = f"layer.{index}", block.attention
        entries += [
            Entry(attention.query_dense.kernel, f"{p}.rel_attn.q"),
            Entry(attention.key_dense.kernel, f"{p}.rel_attn.k"),
            Entry(attention.value_dense.kernel, f"{p}.rel_attn.v"),
            Entry(attention.position_dense.kernel, f"{p}.rel_attn.r"),
            Entry(attention.output_dense.kernel, f"{p}.rel_attn.o", Permute((1, 2, 0))),
            Entry(attention.r_w_bias, f"{p}.rel_attn.r_w_bias"),
            Entry(attention.r_r_bias, f"{p}.rel_attn.r_r_bias"),
            Entry(attention.r_s_bias, f"{p}.rel_attn.r_s_bias"),
            Entry(attention.seg_embed, f"{p}.rel_attn.seg_embed"),
        ]
        entries += norm_entries(block.attention_norm, f"{p}.rel_attn.layer_norm")
        entries += dense_entries(block.feed_forward.intermediate_dense, f"{p}.ff.layer_1")
        entries += dense_entries(block.feed_forward.output_dense, f"{p}.ff.layer_2")
        entries += norm_entries(block.feed_forward_norm, f"{p}.ff.layer_norm")
    return entries


convert_xlnet = mapped_converter(
    XLNetBackbone, xlnet_config_from_huggingface, xlnet_weight_map, config_fields.XLNET,
    prefixes=("transformer.", ""), ignore=XLNET_IGNORED)


def export_xlnet(backbone):
    check_class(backbone, "XLNetBackbone", "xlnet")
    config = {
        "model_type": "xlnet",
        "architectures": ["XLNetModel"],
        "vocab_size": backbone.vocabulary_size,
        "d_model": backbone.hidden_size,
        "n_layer": backbone.num_layers,
        "n_head": backbone.num_heads,
        "d_head": backbone.hidden_size // backbone.num_heads,
        "d_inner": backbone.intermediate_size,
        "ff_activation": activation_to_huggingface(backbone.activation),
        "dropout": backbone.dropout,
        "mem_len": backbone.mem_len or None,
        "clamp_len": backbone.clamp_length,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "initializer_range": backbone.initializer_range,
        "attn_type": backbone.attention_type,
        "same_length": backbone.same_length,
        "bi_data": False,
        "untie_r": True,
    }
    return config, export_weight_map(xlnet_weight_map(backbone))


def xlnet_from_keras_hub(source, c):
    """keras-hub's XLNetBackbone -> ours."""
    ours = XLNetBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                         num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                         intermediate_size=c["intermediate_dim"], dropout=c["dropout"],
                         attention_dropout=c["dropout"], activation=c.get("activation", "gelu"),
                         layer_norm_epsilon=1e-12,
                         initializer_range=c.get("kernel_initializer_range", 0.02))
    entries = [Entry(ours.token_embedding.embeddings,
                     "content_query_embedding/word_embedding/embeddings"),
               Entry(ours.mask_embedding.mask_emb, "encoder_block_attn_mask_layer/mask_emb",
                     Reshape((1, 1, c["hidden_dim"])))]
    for i, block in enumerate(ours.blocks):
        p, attention, ffn = f"xlnet_encoder_{i}/", block.attention, block.feed_forward
        entries += [
            Entry(attention.r_w_bias, p + "content_attention_bias"),
            Entry(attention.r_r_bias, p + "positional_attention_bias"),
            Entry(attention.r_s_bias, p + "segment_attention_bias"),
            Entry(attention.seg_embed, p + "segment_encoding"),
            Entry(attention.query_dense.kernel, p + "rel_attn/query/kernel"),
            Entry(attention.key_dense.kernel, p + "rel_attn/key/kernel"),
            Entry(attention.value_dense.kernel, p + "rel_attn/value/kernel"),
            Entry(attention.position_dense.kernel, p + "rel_attn/encoding/kernel"),
            Entry(attention.output_dense.kernel, p + "rel_attn/attention_output/kernel",
                  Permute((1, 2, 0))),
            Entry(block.attention_norm.gamma, p + "layer_norm_rel_attn/gamma"),
            Entry(block.attention_norm.beta, p + "layer_norm_rel_attn/beta"),
            Entry(block.feed_forward_norm.gamma, p + "layer_norm_ff/gamma"),
            Entry(block.feed_forward_norm.beta, p + "layer_norm_ff/beta"),
            Entry(ffn.intermediate_dense.kernel, p + "feedforward_intermediate_dense/kernel"),
            Entry(ffn.intermediate_dense.bias, p + "feedforward_intermediate_dense/bias"),
            Entry(ffn.output_dense.kernel, p + "feedforward_output_dense/kernel"),
            Entry(ffn.output_dense.bias, p + "feedforward_output_dense/bias"),
        ]
    return ours, entries


_XLNET_STACKED = ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")


def _xlnet_tensors(variables, num_layers):
    """HF XLNet names of the original model/transformer/... variables."""
    tensors = {}
    root = "model/transformer/"
    for name, value in variables.items():
        if SKIPPED.search(name):
            continue
        if not name.startswith(root):
            tensors[f"<unknown TF variable {name}>"] = value
            continue
        path = name[len(root):]
        if path == "word_embedding/lookup_table":
            tensors["word_embedding.weight"] = value
        elif path == "mask_emb/mask_emb":
            tensors["mask_emb"] = value
        elif path in _XLNET_STACKED:
            tied = value.ndim == (3 if path == "seg_embed" else 2)  # untie_r=False
            for i in range(num_layers):
                tensors[f"layer.{i}.rel_attn.{path}"] = value if tied else value[i]
        else:
            match = re.match(r"layer_(\d+)/(rel_attn|ff)/(.+)$", path)
            if match is None:
                tensors[f"<unknown TF variable {name}>"] = value
                continue
            layer, block, rest = match.groups()
            p = f"layer.{layer}.{block}."
            if rest in ("LayerNorm/gamma", "LayerNorm/beta"):
                tensors[p + "layer_norm." + ("weight" if rest.endswith("gamma") else "bias")] = \
                    value
            elif block == "rel_attn" and rest in ("q/kernel", "k/kernel", "v/kernel",
                                                   "o/kernel", "r/kernel"):
                tensors[p + rest[0]] = value
            elif block == "ff" and rest in ("layer_1/kernel", "layer_2/kernel"):
                tensors[p + rest.split("/")[0] + ".weight"] = np.ascontiguousarray(value.T)
            elif block == "ff" and rest in ("layer_1/bias", "layer_2/bias"):
                tensors[p + rest.split("/")[0] + ".bias"] = value
            else:
                tensors[f"<unknown TF variable {name}>"] = value
    return tensors


def _xlnet_variables(tensors, num_layers):
    """Inverse of _xlnet_tensors (untied biases, as every released XLNet)."""
    root = "model/transformer/"
    variables = {root + "word_embedding/lookup_table": tensors["word_embedding.weight"],
                 root + "mask_emb/mask_emb": tensors["mask_emb"]}
    for key in _XLNET_STACKED:
        variables[root + key] = np.stack([tensors[f"layer.{i}.rel_attn.{key}"]
                                          for i in range(num_layers)])
    for i in range(num_layers):
        a, f, out = f"layer.{i}.rel_attn.", f"layer.{i}.ff.", f"{root}layer_{i}/"
        for k in "qkvor":
            variables[f"{out}rel_attn/{k}/kernel"] = tensors[a + k]
        variables[out + "rel_attn/LayerNorm/gamma"] = tensors[a + "layer_norm.weight"]
        variables[out + "rel_attn/LayerNorm/beta"] = tensors[a + "layer_norm.bias"]
        for k in ("layer_1", "layer_2"):
            variables[f"{out}ff/{k}/kernel"] = np.ascontiguousarray(tensors[f"{f}{k}.weight"].T)
            variables[f"{out}ff/{k}/bias"] = tensors[f"{f}{k}.bias"]
        variables[out + "ff/LayerNorm/gamma"] = tensors[f + "layer_norm.weight"]
        variables[out + "ff/LayerNorm/beta"] = tensors[f + "layer_norm.bias"]
    return variables


def _xlnet_config_to_hf(config):
    missing = [k for k in ("n_token", "d_model", "n_layer", "n_head", "d_inner")
               if k not in config]
    if missing:
        raise CheckpointError(f"xlnet_config.json lacks {', '.join(missing)}.")
    return {"model_type": "xlnet", "vocab_size": config["n_token"], "d_model": config["d_model"],
            "n_layer": config["n_layer"], "n_head": config["n_head"],
            "d_head": config.get("d_head"), "d_inner": config["d_inner"],
            "ff_activation": config.get("ff_activation", "gelu"),
            "untie_r": config.get("untie_r", True), "layer_norm_eps": 1e-12}


def xlnet_read(variables, config, generator):
    config = _xlnet_config_to_hf(config)
    return config, _xlnet_tensors(variables, config["n_layer"])


def xlnet_write(config, tensors):
    variables = _xlnet_variables(tensors, config["n_layer"])
    config = {"n_token": config["vocab_size"], "d_model": config["d_model"],
              "n_layer": config["n_layer"], "n_head": config["n_head"],
              "d_head": config["d_head"], "d_inner": config["d_inner"],
              "ff_activation": config["ff_activation"], "untie_r": True}
    return config, variables


xlnet_from_keras_hub.config_fields = config_fields.KERAS_HUB_XLNET


# ---------------------------------------------------------------- the family's converter specs

# XLNetLMHeadModel's lm_loss: Linear tied to word_embedding, with a bias.
MASKED_LM = MaskedLMLayout("XLNetLMHeadModel", "transformer.", bias="lm_loss.bias",
                           decoder="lm_loss.weight")

# transformers' XLNetTokenizer defaults (tokenization_xlnet.py): cased, accents stripped.
HUGGINGFACE = (HuggingFace("xlnet", convert_xlnet, export_xlnet, masked_lm=MASKED_LM,
                           text={"do_lower_case": False, "keep_accents": False}),)
KERAS_HUB = (KerasHub("XLNetBackbone", xlnet_from_keras_hub),)
TF_CHECKPOINT = TFLayout("xlnet", "xlnet_config.json", "model/transformer/", read=xlnet_read,
                         write=xlnet_write)
