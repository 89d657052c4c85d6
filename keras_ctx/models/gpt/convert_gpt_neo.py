"""Hugging Face GPT-Neo (model_type "gpt_neo") checkpoints <-> GPTBackbone.

GPT-Neo is GPT-2's pre-LN decoder with GPT-3's alternating attention: the
config's `attention_types` (e.g. [[["global", "local"], 12]]) expands to one
type per layer, "global" = dense causal, "local" = the band
i - window_size < j <= i (our "local" layers, `window_size`). Differences
from GPT-2 that the converter carries into GPTBackbone's options:

- attention scores are not scaled by 1/sqrt(head size) (`attention_scale=1.0`);
- q_proj/k_proj/v_proj are bias-free torch Linear layers (`use_qkv_bias=False`),
  out_proj has a bias; the MLP's c_fc/c_proj are torch Linear (out, in), not
  GPT-2's Conv1D (in, out).

The causal buffers `attn.attention.bias` / `masked_bias` of older
checkpoints and the tied `lm_head.weight` are skipped.
"""

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class, required
from keras_ctx.convert.huggingface import (
    mapped_converter,
    CheckpointError,
    activation_from_huggingface,
    activation_to_huggingface,
)
from keras_ctx.convert.mapping import (
    Entry,
    attention_entries,
    dense_entries,
    export_weight_map,
    norm_entries,
)
from keras_ctx.models.gpt.backbone import GPTBackbone
from keras_ctx.registry import HuggingFace

GPT_NEO_IGNORED = (r"h\.\d+\.attn\.attention\.(bias|masked_bias)", r"lm_head\.weight",
                   r"score\.(weight|bias)")
# Hugging Face's names for GPT-Neo's two attention types -> ours.
_TYPES = {"global": "dense", "local": "local"}


def expand_attention_types(attention_types):
    """[[["global", "local"], 12]] -> ["global", "local", ...] (24 entries)."""
    layers = []
    try:
        for types, repeat in attention_types:
            layers.extend(list(types) * int(repeat))
    except (TypeError, ValueError):
        raise CheckpointError(f"config.json attention_types {attention_types!r} is not a "
                              "list of [[types...], repeat] pairs.") from None
    return layers


def gpt_neo_config_from_huggingface(config):
    required(config, "vocab_size", "hidden_size", "num_layers", "num_heads",
              "attention_types")
    layers = expand_attention_types(config["attention_types"])
    if len(layers) != config["num_layers"]:
        raise CheckpointError(f"config.json attention_types give {len(layers)} layers but "
                              f"num_layers is {config['num_layers']}.")
    if "attention_layers" in config and list(config["attention_layers"]) != layers:
        raise CheckpointError("config.json attention_layers disagrees with attention_types.")
    unknown = sorted(set(layers) - set(_TYPES))
    if unknown:
        raise CheckpointError(f"config.json attention types {unknown} are not supported; "
                              "GPT-Neo has 'global' and 'local'.")
    hidden = config["hidden_size"]
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_size=hidden,
        intermediate_size=config.get("intermediate_size") or 4 * hidden,
        max_sequence_length=config.get("max_position_embeddings", 2048),
        dropout=config.get("resid_dropout", 0.0),
        normalize_first=True,
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
        activation=activation_from_huggingface(config.get("activation_function", "gelu_new"),
                                               "activation_function"),
        scale_residual_init=False,
        attention_pattern=[_TYPES[t] for t in layers],
        window_size=config.get("window_size", 256),
        attention_scale=1.0,
        use_qkv_bias=False,
    )


def _check_exportable(backbone):
    c = backbone.get_config()
    problems = []
    if backbone.final_norm is None:
        problems.append("it is post-LN (normalize_first=False)")
    if c.get("attention_scale") != 1.0:
        problems.append(f"its attention_scale is {c.get('attention_scale')} (GPT-Neo: 1.0)")
    if c.get("use_qkv_bias", True):
        problems.append("its query/key/value projections have biases (GPT-Neo: none)")
    if backbone.head_size * backbone.num_heads != backbone.hidden_size:
        problems.append("its heads * head_size differs from hidden_size")
    if problems:
        raise CheckpointError("This GPTBackbone cannot be written as gpt_neo: "
                              + "; ".join(problems) + ".")


def gpt_neo_weight_map(backbone):
    """[Entry] of a GPTBackbone in Hugging Face gpt_neo names."""
    heads = backbone.num_heads
    entries = [Entry(backbone.token_embedding.embeddings, "wte.weight"),
               Entry(backbone.position_embedding.position_embeddings, "wpe.weight")]
    for i, block in enumerate(backbone.blocks):
        p = f"h.{i}."
        attention = block.self_attention
        names = {part: f"{p}attn.attention.{part[0]}_proj"
                 for part in ("query", "key", "value")}
        names["output"] = p + "attn.attention.out_proj"
        entries += attention_entries(attention, names, heads, use_bias=False)
        entries.append(Entry(attention.output_dense.bias, names["output"] + ".bias"))
        entries += norm_entries(block.self_attention_norm, p + "ln_1")
        entries += norm_entries(block.feedforward_norm, p + "ln_2")
        entries += dense_entries(block.feedforward.intermediate_dense, p + "mlp.c_fc")
        entries += dense_entries(block.feedforward.output_dense, p + "mlp.c_proj")
    entries += norm_entries(backbone.final_norm, "ln_f")
    return entries


convert_gpt_neo = mapped_converter(
    GPTBackbone, gpt_neo_config_from_huggingface, gpt_neo_weight_map, config_fields.GPT_NEO,
    prefixes=("transformer.", ""), ignore=GPT_NEO_IGNORED)


def _attention_types_to_huggingface(types):
    """["dense", "local", "dense", "local"] -> [[["global", "local"], 2]]."""
    theirs = [{"dense": "global", "local": "local"}[t] for t in types]
    if len(theirs) % 2 == 0 and theirs == theirs[:2] * (len(theirs) // 2):
        return [[theirs[:2], len(theirs) // 2]]
    return [[[t], 1] for t in theirs]


def export_gpt_neo(backbone):
    check_class(backbone, "GPTBackbone", "gpt_neo")
    _check_exportable(backbone)
    c = backbone.get_config()
    attention_types = _attention_types_to_huggingface(backbone.attention_types)
    config = {
        "model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"],
        "vocab_size": c["vocabulary_size"], "hidden_size": c["hidden_size"],
        "num_layers": c["num_layers"], "num_heads": c["num_heads"],
        "intermediate_size": c["intermediate_size"],
        "max_position_embeddings": c["max_sequence_length"],
        "attention_types": attention_types,
        "attention_layers": expand_attention_types(attention_types),
        "window_size": c["window_size"],
        "resid_dropout": c["dropout"], "embed_dropout": c["dropout"],
        "attention_dropout": c["dropout"],
        "layer_norm_epsilon": c["layer_norm_epsilon"],
        "activation_function": activation_to_huggingface(c["activation"]),
    }
    return config, export_weight_map(gpt_neo_weight_map(backbone))


# ---------------------------------------------------------------- the family's converter specs

HUGGINGFACE = (HuggingFace("gpt_neo", convert_gpt_neo, export_gpt_neo),)
