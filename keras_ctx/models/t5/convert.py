"""Hugging Face T5 / T5 v1.1 / mT5 checkpoints (model_type "t5", "mt5") <-> T5Backbone.

T5 has no biases, RMS norms (`layer_norm.weight` only) and one relative
position bias table per stack, in the first block
(`encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight`,
(num_buckets, heads)). The shared embedding is `shared.weight`
(`encoder/decoder.embed_tokens.weight` are copies). The layout is
T5ForConditionalGeneration's. Two things decide the output layer, read as
transformers 4 and 5 read them (`output_layer`):

    tied     no `lm_head.weight`, or one equal to `shared.weight` (not written back);
             a distinct stored `lm_head.weight` is the backbone's `lm_head`
             (transformers 5 writes `tie_word_embeddings: true` for every T5 and
             mT5 and unties on load when the stored head differs)
    rescale  the decoder output times d_model^-0.5 before the head:
             `scale_decoder_outputs` where the config records it (transformers 5:
             false for v1.1); else `tie_word_embeddings` (transformers 4's rule, and
             5's T5Config default), except an mT5 saved by transformers >= 5, which
             never rescales (its MT5Config forces tie true)

Refused: `tie_word_embeddings: false` without a stored `lm_head.weight`. Written
back: `tie_word_embeddings` (false where there is an `lm_head`, so transformers 4
unties too) and `scale_decoder_outputs` explicitly. `feed_forward_proj`
"gated-gelu" (v1.1, mT5) is `DenseGatedActDense`: `wi_0` (under the
activation; HF maps "gated-gelu" to the tanh GELU "gelu_new") times `wi_1`,
then `wo`.
"""

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class, required
from keras_ctx.convert.huggingface import (
    CheckpointError,
    activation_from_huggingface,
    check_tied_copy,
    mapped_converter,
)
from keras_ctx.convert.mapping import (
    LINEAR,
    Entry,
    attention_entries,
    export_weight_map,
    rms_norm_entries,
    with_tied_copy,
)
from keras_ctx.models.t5.backbone import T5Backbone
from keras_ctx.registry import HuggingFace

T5_IGNORED = (r"(encoder|decoder)\.embed_tokens\.weight",)
# feed_forward_proj -> (activation, gated). HF reads "gated-gelu" as gelu_new
# (the tanh GELU of Mesh TensorFlow); a plain "gelu" is the exact one.
PROJECTIONS = {"relu": ("relu", False), "gelu": ("gelu", False),
               "gated-gelu": ("gelu_approximate", True), "gated-relu": ("relu", True)}


def t5_config_from_huggingface(config):
    required(config, "vocab_size", "d_model", "d_ff", "num_layers", "num_heads")
    projection = config.get("feed_forward_proj", "relu")
    if projection not in PROJECTIONS:
        raise CheckpointError(f"feed_forward_proj {projection!r} is not supported; supported: "
                              f"{', '.join(sorted(PROJECTIONS))}.")
    activation, gated = PROJECTIONS[projection]
    # transformers' T5Config derives dense_act_fn and is_gated_act from feed_forward_proj,
    # but a config.json that stores them (save_pretrained does) sets them afterwards: the
    # model computes what they say.
    if "dense_act_fn" in config:
        activation = activation_from_huggingface(config["dense_act_fn"], "dense_act_fn")
    if "is_gated_act" in config:
        if not isinstance(config["is_gated_act"], bool):
            raise CheckpointError(f"is_gated_act = {config['is_gated_act']!r} is not true or "
                                  "false; fix the field.")
        gated = config["is_gated_act"]
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_layers"],
        num_decoder_layers=config.get("num_decoder_layers") or config["num_layers"],
        num_heads=config["num_heads"],
        hidden_size=config["d_model"],
        intermediate_size=config["d_ff"],
        dropout=config.get("dropout_rate", 0.1),
        activation=activation,
        gated_feedforward=gated,
        head_size=config.get("d_kv") or config["d_model"] // config["num_heads"],
        tie_embeddings=bool(config.get("tie_word_embeddings", True)),
        scale_decoder_outputs=scales_decoder_outputs(config),
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
        num_buckets=config.get("relative_attention_num_buckets", 32),
        max_distance=config.get("relative_attention_max_distance", 128),
    )


def _major_version(config):
    try:
        return int(str(config.get("transformers_version", "0")).split(".")[0])
    except ValueError:
        return 0


def scales_decoder_outputs(config):
    """Whether transformers multiplies this checkpoint's decoder output by d_model^-0.5."""
    if "scale_decoder_outputs" in config:
        return bool(config["scale_decoder_outputs"])
    return config.get("tie_word_embeddings", True) is not False


def output_layer(config, tensors):
    """`config` with `tie_word_embeddings` as the stored tensors say (see the module doc)."""
    head, table = tensors.get("lm_head.weight"), tensors.get("shared.weight")
    if head is None and config.get("tie_word_embeddings", True) is False:
        raise CheckpointError("config.json says tie_word_embeddings: false but the "
                              "checkpoint has no lm_head.weight: it is incomplete.")
    distinct = head is not None and (table is None or head.shape != table.shape
                                     or not np.array_equal(head, table))
    # The scale as the original keys say, before tie_word_embeddings is rewritten.
    return dict(config, tie_word_embeddings=not distinct,
                scale_decoder_outputs=scales_decoder_outputs(config))


def _names(p, kind):
    return {"query": f"{p}.{kind}.q", "key": f"{p}.{kind}.k", "value": f"{p}.{kind}.v",
            "output": f"{p}.{kind}.o"}


def t5_weight_map(backbone):
    """[Entry] of a T5Backbone in T5ForConditionalGeneration names (lm_head if untied)."""
    heads = backbone.num_heads
    entries = [Entry(backbone.token_embedding.embeddings, "shared.weight")]
    if backbone.lm_head is not None:
        entries.append(Entry(backbone.lm_head.kernel, "lm_head.weight", LINEAR))
    for stack, blocks, bias, norm in (
            ("encoder", backbone.encoder_blocks, backbone.encoder_bias, backbone.encoder_norm),
            ("decoder", backbone.decoder_blocks, backbone.decoder_bias, backbone.decoder_norm)):
        entries.append(Entry(bias.bias_table, f"{stack}.block.0.layer.0.SelfAttention."
                                              "relative_attention_bias.weight"))
        for i, block in enumerate(blocks):
            p = f"{stack}.block.{i}.layer"
            entries += attention_entries(block.self_attention, _names(p + ".0", "SelfAttention"),
                                         heads, use_bias=False)
            entries += rms_norm_entries(block.self_attention_norm, p + ".0.layer_norm.weight")
            ffn = 1
            if stack == "decoder":
                entries += attention_entries(block.cross_attention,
                                             _names(p + ".1", "EncDecAttention"), heads,
                                             use_bias=False)
                entries += rms_norm_entries(block.cross_attention_norm,
                                            p + ".1.layer_norm.weight")
                ffn = 2
            f, feedforward = f"{p}.{ffn}.DenseReluDense", block.feedforward
            if backbone.gated_feedforward:  # act(x wi_0) * (x wi_1)
                entries += [Entry(feedforward.intermediate_dense.kernel, f"{f}.wi_0.weight",
                                  LINEAR),
                            Entry(feedforward.gate_dense.kernel, f"{f}.wi_1.weight", LINEAR)]
            else:
                entries.append(Entry(feedforward.intermediate_dense.kernel, f"{f}.wi.weight",
                                     LINEAR))
            entries.append(Entry(feedforward.output_dense.kernel, f"{f}.wo.weight", LINEAR))
            f = f"{p}.{ffn}"
            entries += rms_norm_entries(block.feedforward_norm, f"{f}.layer_norm.weight")
        entries += rms_norm_entries(norm, f"{stack}.final_layer_norm.weight")
    return entries


def _prepare(tensors, backbone):
    tensors = with_tied_copy(tensors, "shared.weight",
                             ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"))
    if backbone.lm_head is None:
        check_tied_copy(tensors, "lm_head.weight", "shared.weight",
                        "config.json tie_word_embeddings is true; untied checkpoints say false")
        tensors = {name: value for name, value in tensors.items() if name != "lm_head.weight"}
    return tensors


_mapped = mapped_converter(T5Backbone, t5_config_from_huggingface, t5_weight_map,
                           config_fields.T5, ignore=T5_IGNORED, prepare=_prepare)


def _convert(config, tensors, **kwargs):
    if tensors is not None:
        config = output_layer(config, tensors)
    return _mapped(config, tensors, **kwargs)


convert_t5 = _convert
convert_t5.config_fields = _mapped.config_fields


def convert_mt5(config, tensors, **kwargs):
    """mT5: T5 v1.1's layout with a 250k vocabulary. MT5Config 5 forces
    tie_word_embeddings true, yet mT5 never rescales its decoder output."""
    if _major_version(config) >= 5 and "scale_decoder_outputs" not in config:
        config = dict(config, scale_decoder_outputs=False)
    return _convert(config, tensors, **kwargs)


convert_mt5.config_fields = _mapped.config_fields


def _projection_name(backbone):
    for name, (activation, gated) in PROJECTIONS.items():
        if (activation, gated) == (backbone.activation, backbone.gated_feedforward):
            return name
    raise CheckpointError(f"A {'gated ' if backbone.gated_feedforward else ''}"
                          f"{backbone.activation!r} feed-forward has no Hugging Face "
                          f"feed_forward_proj; supported: {', '.join(sorted(PROJECTIONS))}.")


def _exporter(model_type, architecture):
    def export(backbone):
        check_class(backbone, "T5Backbone", model_type)
        c = backbone.get_config()
        config = {
            "model_type": model_type, "architectures": [architecture],
            "vocab_size": c["vocabulary_size"], "d_model": c["hidden_size"],
            "d_kv": c["head_size"], "d_ff": c["intermediate_size"],
            "num_layers": c["num_layers"], "num_decoder_layers": c["num_decoder_layers"],
            "num_heads": c["num_heads"], "dropout_rate": c["dropout"],
            "feed_forward_proj": _projection_name(backbone),
            "layer_norm_epsilon": c["layer_norm_epsilon"],
            "relative_attention_num_buckets": c["num_buckets"],
            "relative_attention_max_distance": c["max_distance"],
            "tie_word_embeddings": c["tie_embeddings"],
            "scale_decoder_outputs": backbone.scale_decoder_outputs,
            "pad_token_id": 0, "eos_token_id": 1,
            "decoder_start_token_id": 0,
        }
        return config, export_weight_map(t5_weight_map(backbone))

    return export


export_t5 = _exporter("t5", "T5ForConditionalGeneration")
export_mt5 = _exporter("mt5", "MT5ForConditionalGeneration")


# ---------------------------------------------------------------- the family's converter specs

HUGGINGFACE = (HuggingFace("t5", convert_t5, export_t5),
               HuggingFace("mt5", convert_mt5, export_mt5))
