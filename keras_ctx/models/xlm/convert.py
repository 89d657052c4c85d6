"""Hugging Face XLM checkpoints (model_type "xlm") <-> XLMBackbone.

HF's XLMModel names: embeddings, position_embeddings, lang_embeddings (when
n_langs > 1 and use_lang_emb), layer_norm_emb, then per layer i
attentions.i.{q,k,v,out}_lin, layer_norm1.i, ffns.i.lin1/lin2, layer_norm2.i
(post-LN, as ours). The FFN is 4 * emb_dim wide in every XLM.
"""

from keras_ctx.convert import config_fields
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.convert.huggingface import (
    mapped_converter,
    CheckpointError,
)
from keras_ctx.convert.mapping import (
    Entry,
    block_entries,
    export_weight_map,
    layer_by_name,
    norm_entries,
)
from keras_ctx.models.xlm.backbone import XLMBackbone
from keras_ctx.registry import HuggingFace

# Buffers and heads (XLMWithLMHeadModel's pred_layer, classifiers' sequence_summary).
XLM_IGNORED = (r"position_ids", r"pred_layer\..+", r"sequence_summary\..+", r"qa_outputs\..+",
               r"classifier\..+")


def xlm_config_from_huggingface(config):
    missing = [k for k in ("vocab_size", "emb_dim", "n_layers", "n_heads") if k not in config]
    if missing:
        raise CheckpointError(f"config.json lacks {', '.join(missing)}, needed to build XLM.")
    activation = "gelu" if config.get("gelu_activation", True) else "relu"
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["n_layers"],
        num_heads=config["n_heads"],
        hidden_size=config["emb_dim"],
        intermediate_size=4 * config["emb_dim"],  # XLM's TransformerFFN: 4 * dim
        num_languages=config.get("n_langs", 1),
        use_language_embeddings=config.get("use_lang_emb", True),
        causal=config.get("causal", False),
        dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.1),
        max_sequence_length=config.get("max_position_embeddings", 512),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        activation=activation,
        languages=languages_from_huggingface(config),
    )


def languages_from_huggingface(config):
    """The language codes in id order from config.json's `lang2id` / `id2lang` (transformers'
    XLM configs, XLM's params.lang2id), or None where it has neither."""
    named = None
    for field in ("lang2id", "id2lang"):
        pairs = config.get(field)
        if pairs is None:
            continue
        if not isinstance(pairs, dict):
            raise CheckpointError(f"{field} is a mapping of language codes and ids, got "
                                  f"{pairs!r}.")
        items = pairs.items() if field == "id2lang" else [(i, c) for c, i in pairs.items()]
        if not all(str(i).isdigit() and isinstance(c, str) and c for i, c in items):
            raise CheckpointError(f"{field} must pair language ids with codes, got {pairs!r}.")
        ids = {int(i): code for i, code in items}
        if sorted(ids) != list(range(len(pairs))):
            raise CheckpointError(f"{field} numbers its languages {sorted(ids)}, not "
                                  f"0..{len(pairs) - 1} each once.")
        if named is not None and named != ids:
            raise CheckpointError(f"lang2id and id2lang disagree ({config['lang2id']} vs "
                                  f"{pairs}); fix one.")
        named = ids
    return None if named is None else [named[i] for i in range(len(named))]


def languages_from_tokenizer_config(config, tokenizer_config):
    """config.json's fields with the languages of tokenizer_config.json's `lang2id` /
    `id2lang` where config.json names none (transformers' XLMTokenizer takes them, and
    some checkpoints keep them there only); config.json's and tokenizer_config.json's
    languages disagreeing is refused."""
    try:
        theirs = languages_from_huggingface(tokenizer_config)
    except CheckpointError as error:
        raise CheckpointError(f"tokenizer_config.json: {error}") from None
    if theirs is None:
        return config
    try:
        ours = languages_from_huggingface(config)
    except CheckpointError as error:
        raise CheckpointError(f"config.json: {error}") from None
    if ours is None:
        return {**config, **_language_fields(theirs)}
    if ours != theirs:
        raise CheckpointError(f"config.json names the languages {', '.join(ours)} (in id "
                              f"order), tokenizer_config.json {', '.join(theirs)}: make "
                              "their lang2id / id2lang equal.")
    return config


def _gelu(activation):
    if activation not in ("gelu", "relu"):
        raise CheckpointError(f"HF XLM has GeLU or ReLU FFNs, not {activation!r}.")
    return activation == "gelu"


def xlm_config_to_huggingface(backbone):
    if backbone.intermediate_size != 4 * backbone.hidden_size:
        raise CheckpointError(f"HF XLM fixes the FFN at 4 * emb_dim ({4 * backbone.hidden_size}),"
                              f" this backbone has {backbone.intermediate_size}.")
    return {
        "model_type": "xlm",
        "architectures": ["XLMModel"],
        "vocab_size": backbone.vocabulary_size,
        "emb_dim": backbone.hidden_size,
        "n_layers": backbone.num_layers,
        "n_heads": backbone.num_heads,
        "n_langs": backbone.num_languages,
        "use_lang_emb": backbone.use_language_embeddings,
        "causal": backbone.causal,
        "dropout": backbone.dropout,
        "attention_dropout": backbone.attention_dropout,
        "max_position_embeddings": backbone.max_sequence_length,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "gelu_activation": _gelu(backbone.activation),
        "sinusoidal_embeddings": False,
        "asm": False,
        "init_std": 0.02,
        **_language_fields(backbone.languages),
    }


def _language_fields(languages):
    """transformers' XLM config fields for the backbone's languages (none when unnamed)."""
    if languages is None:
        return {}
    return {"lang2id": {code: i for i, code in enumerate(languages)},
            "id2lang": {str(i): code for i, code in enumerate(languages)}}


def xlm_weight_map(backbone):
    """[Entry] of an XLMBackbone in HF XLM names (without the "transformer." prefix)."""
    entries = [
        Entry(backbone.token_embedding.embeddings, "embeddings.weight"),
        Entry(layer_by_name(backbone, "position_embedding").embeddings,
              "position_embeddings.weight"),
    ]
    if backbone.use_language_embeddings and backbone.num_languages > 1:
        entries.append(Entry(layer_by_name(backbone, "language_embedding").embeddings,
                             "lang_embeddings.weight"))
    entries += norm_entries(layer_by_name(backbone, "embeddings_norm"), "layer_norm_emb")
    for i, block in enumerate(layer_by_name(backbone, "encoder").blocks):
        entries += block_entries(block, {
            "query": f"attentions.{i}.q_lin", "key": f"attentions.{i}.k_lin",
            "value": f"attentions.{i}.v_lin", "attention_output": f"attentions.{i}.out_lin",
            "attention_norm": f"layer_norm1.{i}", "intermediate": f"ffns.{i}.lin1",
            "output": f"ffns.{i}.lin2", "output_norm": f"layer_norm2.{i}",
        }, backbone.num_heads)
    return entries


convert_xlm = mapped_converter(
    XLMBackbone, xlm_config_from_huggingface, xlm_weight_map, config_fields.XLM,
    prefixes=("transformer.", ""), ignore=XLM_IGNORED)


def export_xlm(backbone):
    from keras_ctx.models.xlm.backbone import XLMBackbone

    if not isinstance(backbone, XLMBackbone):
        raise CheckpointError(f"model_type 'xlm' exports an XLMBackbone, not a "
                              f"{type(backbone).__name__}.")
    return xlm_config_to_huggingface(backbone), export_weight_map(xlm_weight_map(backbone))


# ---------------------------------------------------------------- the family's converter specs

# XLM's PredLayer (asm=False): the tied proj + bias, no transform.
MASKED_LM = MaskedLMLayout("XLMWithLMHeadModel", "transformer.", bias="pred_layer.proj.bias",
                           decoder="pred_layer.proj.weight")

# XLMTokenizer's default, under tokenizer_config.json's (False for the cased 17- and
# 100-language models): its text goes through Moses before the "</w>" BPE (xlm_text).
HUGGINGFACE = (HuggingFace("xlm", convert_xlm, export_xlm, masked_lm=MASKED_LM,
                           text={"do_lowercase_and_remove_accent": True},
                           tokenizer_config=languages_from_tokenizer_config),)
