"""Hugging Face XLNet checkpoints (model_type "xlnet") <-> XLNetBackbone.

HF XLNet stores each layer's projections as (d_model, n_head, d_head)
tensors used in einsums, which are our EinsumDense kernels as they are,
except the output projection `o`, applied as "ibnd,hnd->ibh": our
(heads, size, d_model) kernel is its transpose (1, 2, 0). `mask_emb`
(1, 1, d_model) is the query stream's start `w`.
"""

from keras_ctx.convert.base import check_class, required
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
from keras_ctx.models.xlnet import XLNetBackbone

XLNET_IGNORED = (r"lm_loss\.(weight|bias)", r"sequence_summary\..+", r"logits_proj\..+",
                 r"qa_outputs\..+", r"start_logits\..+", r"end_logits\..+", r"answer_class\..+")


def xlnet_config_from_huggingface(config):
    required(config, "vocab_size", "n_layer", "n_head", "d_model", "d_inner")
    attention_type = config.get("attn_type", "bi")
    if attention_type not in ("bi", "uni"):
        raise CheckpointError(f"attn_type {attention_type!r}: XLNet has 'bi' and 'uni'.")
    if config.get("bi_data", False):
        raise CheckpointError("bi_data=true (bidirectional data pipeline) is not supported.")
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
        activation=activation_from_huggingface(config.get("ff_activation", "gelu")),
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
    XLNetBackbone, xlnet_config_from_huggingface, xlnet_weight_map,
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
