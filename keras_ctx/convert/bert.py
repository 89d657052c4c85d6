"""Hugging Face BERT checkpoints (model_type "bert") -> BertBackbone."""

from keras_ctx.convert.huggingface import (
    TensorReader,
    assign,
    heads_to_linear_output,
    linear_to_heads,
    register_converter,
)


def bert_config_from_huggingface(config):
    activation = config.get("hidden_act", "gelu")
    if activation not in ("gelu", "relu"):
        # HF "gelu_new" is the tanh approximation; keep it explicit.
        activation = {"gelu_new": "gelu_approximate"}.get(activation, activation)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        activation=activation,
    )


def _layer_by_name(model, name):
    return next(layer for layer in model.layers if layer.name == name)


def _norm(layer, read, prefix):
    assign(layer.gamma, read(prefix + ".weight"), prefix)
    assign(layer.beta, read(prefix + ".bias"), prefix)


def _attention(attention, read, prefix, num_heads):
    for ours, theirs in (("query_dense", "query"), ("key_dense", "key"),
                         ("value_dense", "value")):
        kernel, bias = linear_to_heads(read(f"{prefix}.self.{theirs}.weight"),
                                       read(f"{prefix}.self.{theirs}.bias"), num_heads)
        dense = getattr(attention, ours)
        assign(dense.kernel, kernel, f"{prefix}.self.{theirs}")
        assign(dense.bias, bias, f"{prefix}.self.{theirs}")
    output = attention.output_dense
    assign(output.kernel, heads_to_linear_output(read(f"{prefix}.output.dense.weight"),
                                                 num_heads), f"{prefix}.output.dense")
    assign(output.bias, read(f"{prefix}.output.dense.bias"), f"{prefix}.output.dense")


def _dense(dense, read, prefix):
    assign(dense.kernel, read(prefix + ".weight").T, prefix)
    assign(dense.bias, read(prefix + ".bias"), prefix)


def load_bert_weights(backbone, read, num_heads):
    """Copies HF BERT tensors (names without the model prefix) into a BertBackbone."""
    assign(backbone.token_embedding.embeddings, read("embeddings.word_embeddings.weight"),
           "word_embeddings")
    assign(_layer_by_name(backbone, "position_embedding").position_embeddings,
           read("embeddings.position_embeddings.weight"), "position_embeddings")
    assign(_layer_by_name(backbone, "segment_embedding").embeddings,
           read("embeddings.token_type_embeddings.weight"), "token_type_embeddings")
    _norm(_layer_by_name(backbone, "embeddings_norm"), read, "embeddings.LayerNorm")
    stack = _layer_by_name(backbone, "encoder")
    for index, block in enumerate(stack.blocks):
        prefix = f"encoder.layer.{index}"
        _attention(block.self_attention, read, f"{prefix}.attention", num_heads)
        _norm(block.self_attention_norm, read, f"{prefix}.attention.output.LayerNorm")
        _dense(block.feedforward.intermediate_dense, read, f"{prefix}.intermediate.dense")
        _dense(block.feedforward.output_dense, read, f"{prefix}.output.dense")
        _norm(block.feedforward_norm, read, f"{prefix}.output.LayerNorm")
    _dense(_layer_by_name(backbone, "pooler"), read, "pooler.dense")


@register_converter("bert")
def convert_bert(config, tensors):
    from keras_ctx.models.bert import BertBackbone

    backbone = BertBackbone(**bert_config_from_huggingface(config))
    if tensors is None:
        return backbone
    read = TensorReader(tensors, prefixes=("bert.", ""))
    load_bert_weights(backbone, read, config["num_attention_heads"])
    # position_ids is a buffer, not a weight; heads are not part of the backbone.
    read.check_all_used(ignore=("position_ids", "cls.", "lm_head", "classifier", "qa_outputs"))
    return backbone
