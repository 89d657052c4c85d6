"""Hugging Face T5 v1.0 checkpoints (model_type "t5") <-> T5Backbone.

T5 has no biases, RMS norms (`layer_norm.weight` only) and one relative
position bias table per stack, in the first block
(`encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight`,
(num_buckets, heads)). The shared embedding is `shared.weight`
(`encoder/decoder.embed_tokens.weight` and a tied `lm_head.weight` are
copies). Gated feed-forwards (T5 v1.1, "gated-gelu") and untied output
embeddings are refused: T5Backbone has neither.
"""

from keras_ctx.convert.bert import _check_class, _required
from keras_ctx.convert.huggingface import (
    CheckpointError,
    register_converter,
    register_exporter,
)
from keras_ctx.convert.mapping import (
    LINEAR,
    Entry,
    attention_entries,
    export_weight_map,
    load_checkpoint,
    rms_norm_entries,
    with_tied_copy,
)

T5_IGNORED = ("embed_tokens", "lm_head")


def t5_config_from_huggingface(config):
    _required(config, "vocab_size", "d_model", "d_ff", "num_layers", "num_heads")
    projection = config.get("feed_forward_proj", "relu")
    if projection not in ("relu", "gelu"):
        raise CheckpointError(f"feed_forward_proj {projection!r}: T5Backbone has no gated "
                              "feed-forward (T5 v1.1); only 'relu' / 'gelu' are supported.")
    if not config.get("tie_word_embeddings", True):
        raise CheckpointError("tie_word_embeddings=false (T5 v1.1): T5Backbone ties its "
                              "output embedding.")
    if config.get("d_kv", config["d_model"] // config["num_heads"]) * config["num_heads"] != \
            config["d_model"]:
        raise CheckpointError(f"d_kv {config['d_kv']} * num_heads {config['num_heads']} != "
                              f"d_model {config['d_model']}: T5Backbone's heads split d_model.")
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_layers"],
        num_decoder_layers=config.get("num_decoder_layers") or config["num_layers"],
        num_heads=config["num_heads"],
        hidden_size=config["d_model"],
        intermediate_size=config["d_ff"],
        dropout=config.get("dropout_rate", 0.1),
        activation=projection,
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
        num_buckets=config.get("relative_attention_num_buckets", 32),
        max_distance=config.get("relative_attention_max_distance", 128),
    )


def _names(p, kind):
    return {"query": f"{p}.{kind}.q", "key": f"{p}.{kind}.k", "value": f"{p}.{kind}.v",
            "output": f"{p}.{kind}.o"}


def t5_weight_map(backbone):
    heads = backbone.num_heads
    entries = [Entry(backbone.token_embedding.embeddings, "shared.weight")]
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
            f = f"{p}.{ffn}"
            entries += [Entry(block.feedforward.intermediate_dense.kernel,
                              f"{f}.DenseReluDense.wi.weight", LINEAR),
                        Entry(block.feedforward.output_dense.kernel,
                              f"{f}.DenseReluDense.wo.weight", LINEAR)]
            entries += rms_norm_entries(block.feedforward_norm, f"{f}.layer_norm.weight")
        entries += rms_norm_entries(norm, f"{stack}.final_layer_norm.weight")
    return entries


@register_converter("t5")
def convert_t5(config, tensors):
    from keras_ctx.models.t5 import T5Backbone

    backbone = T5Backbone(**t5_config_from_huggingface(config))
    if tensors is None:
        return backbone
    tensors = with_tied_copy(tensors, "shared.weight",
                             ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"))
    load_checkpoint(t5_weight_map(backbone), tensors,
                    ignore=T5_IGNORED)
    return backbone


@register_exporter("t5")
def export_t5(backbone):
    _check_class(backbone, "T5Backbone", "t5")
    c = backbone.get_config()
    config = {
        "model_type": "t5", "architectures": ["T5Model"],
        "vocab_size": c["vocabulary_size"], "d_model": c["hidden_size"],
        "d_kv": c["hidden_size"] // c["num_heads"], "d_ff": c["intermediate_size"],
        "num_layers": c["num_layers"], "num_decoder_layers": c["num_decoder_layers"],
        "num_heads": c["num_heads"], "dropout_rate": c["dropout"],
        "feed_forward_proj": c["activation"], "layer_norm_epsilon": c["layer_norm_epsilon"],
        "relative_attention_num_buckets": c["num_buckets"],
        "relative_attention_max_distance": c["max_distance"],
        "tie_word_embeddings": True, "pad_token_id": 0, "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }
    return config, export_weight_map(t5_weight_map(backbone))
