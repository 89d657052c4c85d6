"""Hugging Face BART checkpoints (model_type "bart") <-> BartBackbone.

HF's BartLearnedPositionalEmbedding has max_position_embeddings + 2 rows and
reads row position + 2 (fairseq's offset): the importer drops the first two
rows, the exporter puts two zero rows back. The shared token embedding is
`shared.weight` (`encoder/decoder.embed_tokens.weight` and `lm_head.weight`
are tied copies and skipped; `final_logits_bias` is a head). Variants with
`scale_embedding`, pre-LN (`normalize_before`) or extra final norms (mBART)
are refused.
"""

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import TensorReader, check_class, required
from keras_ctx.convert.huggingface import (
    CheckpointError,
    activation_to_huggingface,
    check_tied_copy,
    mapped_converter,
)
from keras_ctx.convert.kerashub import keras_hub_block_entries
from keras_ctx.convert.mapping import (
    DropRows,
    Entry,
    Reshape,
    attention_entries,
    dense_entries,
    export_weight_map,
    load_weight_map,
    norm_entries,
    with_tied_copy,
)
from keras_ctx.models.bart.backbone import BartBackbone
from keras_ctx.registry import HuggingFace, KerasHub

BART_IGNORED = (r"(encoder|decoder)\.embed_tokens\.weight", r"lm_head\.weight",
                r"final_logits_bias", r"classification_head\..+", r"qa_outputs\.(weight|bias)",
                r"((encoder|decoder)\.)?version")
OFFSET = 2  # BartLearnedPositionalEmbedding.offset


def bart_config_from_huggingface(config):
    required(config, "vocab_size", "d_model", "encoder_layers", "decoder_layers",
              "encoder_attention_heads", "encoder_ffn_dim")
    for ours, theirs in (("encoder_attention_heads", "decoder_attention_heads"),
                         ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(theirs, config[ours]) != config[ours]:
            raise CheckpointError(f"config.json {ours}={config[ours]} differs from "
                                  f"{theirs}={config[theirs]}; BartBackbone shares them.")
    if config.get("activation_function", "gelu") != "gelu":
        raise CheckpointError(f"activation_function {config['activation_function']!r}: "
                              "BartBackbone uses the exact GELU only.")
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["encoder_layers"],
        num_decoder_layers=config["decoder_layers"],
        num_heads=config["encoder_attention_heads"],
        hidden_size=config["d_model"],
        intermediate_size=config["encoder_ffn_dim"],
        max_sequence_length=config.get("max_position_embeddings", 1024),
        dropout=config.get("dropout", 0.1),
        layer_norm_epsilon=1e-5,
    )


def _names(p, kind):
    return {"query": f"{p}.{kind}.q_proj", "key": f"{p}.{kind}.k_proj",
            "value": f"{p}.{kind}.v_proj", "output": f"{p}.{kind}.out_proj"}


def bart_weight_map(backbone):
    """[Entry] of a BartBackbone in HF BART names (without "model.")."""
    heads = backbone.num_heads
    entries = [Entry(backbone.token_embedding.embeddings, "shared.weight")]
    for stack, positions, norm, blocks in (
            ("encoder", backbone.encoder_positions, backbone.encoder_embedding_norm,
             backbone.encoder_blocks),
            ("decoder", backbone.decoder_positions, backbone.decoder_embedding_norm,
             backbone.decoder_blocks)):
        entries.append(Entry(positions.position_embeddings, f"{stack}.embed_positions.weight",
                             DropRows(OFFSET)))
        entries += norm_entries(norm, f"{stack}.layernorm_embedding")
        for i, block in enumerate(blocks):
            p = f"{stack}.layers.{i}"
            entries += attention_entries(block.self_attention, _names(p, "self_attn"), heads)
            entries += norm_entries(block.self_attention_norm, f"{p}.self_attn_layer_norm")
            if stack == "decoder":
                entries += attention_entries(block.cross_attention, _names(p, "encoder_attn"),
                                             heads)
                entries += norm_entries(block.cross_attention_norm,
                                        f"{p}.encoder_attn_layer_norm")
            entries += dense_entries(block.feedforward.intermediate_dense, f"{p}.fc1")
            entries += dense_entries(block.feedforward.output_dense, f"{p}.fc2")
            entries += norm_entries(block.feedforward_norm, f"{p}.final_layer_norm")
    return entries


def _prepare(tensors, backbone):
    tensors = with_tied_copy(tensors, "shared.weight",
                             ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
                             prefixes=("model.", ""))
    # The LM head's names carry no "model." prefix. A BartModel checkpoint
    # has no final_logits_bias: it stays zero, as HF initialises it.
    shared = "model.shared.weight" if "model.shared.weight" in tensors else "shared.weight"
    if shared in tensors:  # else the weight map names what is missing
        check_tied_copy(tensors, "lm_head.weight", shared, "BART ties it to the shared embedding")
    if "final_logits_bias" in tensors:
        load_weight_map(lm_head_entries(backbone), TensorReader(tensors))
    return tensors


convert_bart = mapped_converter(
    BartBackbone, bart_config_from_huggingface, bart_weight_map, config_fields.BART,
    prefixes=("model.", ""), ignore=BART_IGNORED, prepare=_prepare)


def lm_head_entries(backbone):
    """BartForConditionalGeneration's final_logits_bias (1, vocab), top level."""
    return [Entry(backbone.final_logits_bias, "final_logits_bias",
                  Reshape((1, backbone.vocabulary_size)))]


def export_bart(backbone):
    check_class(backbone, "BartBackbone", "bart")
    c = backbone.get_config()
    config = {
        "model_type": "bart", "architectures": ["BartForConditionalGeneration"],
        "vocab_size": c["vocabulary_size"], "d_model": c["hidden_size"],
        "encoder_layers": c["num_layers"], "decoder_layers": c["num_decoder_layers"],
        "encoder_attention_heads": c["num_heads"], "decoder_attention_heads": c["num_heads"],
        "encoder_ffn_dim": c["intermediate_size"], "decoder_ffn_dim": c["intermediate_size"],
        "max_position_embeddings": c["max_sequence_length"], "dropout": c["dropout"],
        "activation_function": activation_to_huggingface("gelu"),
        "scale_embedding": False, "normalize_before": False,
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 2,
    }
    tensors = {"model." + name: value
               for name, value in export_weight_map(bart_weight_map(backbone)).items()}
    return config, dict(tensors, **export_weight_map(lm_head_entries(backbone)))


def bart_from_keras_hub(source, c):
    """keras-hub's BartBackbone -> ours."""
    ours = BartBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                        num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                        intermediate_size=c["intermediate_dim"],
                        max_sequence_length=c["max_sequence_length"], dropout=c["dropout"],
                        layer_norm_epsilon=1e-5)
    entries = [Entry(ours.token_embedding.embeddings, "token_embedding/embeddings")]
    for stack, positions, norm, blocks, attention in (
            ("encoder", ours.encoder_positions, ours.encoder_embedding_norm,
             ours.encoder_blocks, "self_attention_layer"),
            ("decoder", ours.decoder_positions, ours.decoder_embedding_norm,
             ours.decoder_blocks, "self_attention")):
        entries += [Entry(positions.position_embeddings, f"{stack}_position_embedding/embeddings"),
                    Entry(norm.gamma, f"{stack}_embeddings_layer_norm/gamma"),
                    Entry(norm.beta, f"{stack}_embeddings_layer_norm/beta")]
        for i, block in enumerate(blocks):
            entries += keras_hub_block_entries(block, f"transformer_{stack}_layer_{i}", attention)
    return ours, entries


bart_from_keras_hub.config_fields = config_fields.KERAS_HUB_BART


# ---------------------------------------------------------------- the family's converter specs

HUGGINGFACE = (HuggingFace("bart", convert_bart, export_bart,
                           sequence_classifier=("classification_head.dense",
                                                "classification_head.out_proj")),)
KERAS_HUB = (KerasHub("BartBackbone", bart_from_keras_hub),)
