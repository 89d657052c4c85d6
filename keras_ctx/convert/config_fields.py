"""Which config fields of a checkpoint change what its model computes, and what each
converter does with them: one declarative table per format x family.

A Hugging Face config.json carries more than sizes: `position_embedding_type`,
`is_decoder`, `scale_embedding`, `tie_word_embeddings`, ... each changes the
function the reference model computes. A converter that skipped one would
build a different model without a word. So each family's converter declares,
for every such field its reference model reads, either that it is honoured
(the settings function maps it to the backbone) or the only values its
backbone computes (the reference's default among them); `check` refuses any
other value in one line naming the file, the field, the value and what is
supported. Fields the reference model does not read for that model_type
(ids, labels, `architectures`, dropout rates at inference) change nothing and
are not listed.
"""

import dataclasses
import json

from keras_ctx.common.errors import CheckpointError
from keras_ctx.common.validation import closest


@dataclasses.dataclass(frozen=True)
class ConfigFields:
    """What a converter does with the computation-changing fields of its configs.

    Args:
        honoured: fields the converter's settings function turns into backbone
            settings (or checks itself against the tensors).
        fixed: {field: values}: the only values the backbone computes; the
            first is the reference's default (an absent field means it).
        inert: for a format whose every field is known (not Hugging Face's, which
            carries ids, labels, ...), the fields that change nothing (training
            settings); any other field close to a known one is refused as a typo
            (a misspelt optional field would be ignored, its default used).
    """

    honoured: tuple = ()
    fixed: dict = dataclasses.field(default_factory=dict)
    inert: tuple = None

    def __post_init__(self):
        both = set(self.honoured) & set(self.fixed)
        if both:
            raise ValueError(f"fields both honoured and fixed: {sorted(both)}")

    def with_(self, honoured=(), fixed=None, without=()):
        """A copy with more honoured and fixed fields (`without`: fields dropped from both)."""
        kept = {k: v for k, v in self.fixed.items() if k not in without and k not in honoured}
        return ConfigFields(
            tuple(f for f in self.honoured if f not in without) + tuple(honoured),
            {**kept, **(fixed or {})}, self.inert)

    def check(self, config, source, converter=None):
        """CheckpointError naming the first field of `config` whose value the backbone
        does not compute (`converter`: its name, else the config's model_type), or, with
        `inert`, the first field that looks like a misspelt known one."""
        converter = converter or config.get("model_type")
        if self.inert is not None:
            known = {*self.honoured, *self.fixed, *self.inert}
            for field in config:
                meant = closest(field, known) if field not in known else ""
                if meant:
                    raise CheckpointError(
                        f"{source}: {field} is not a field the {converter} converter "
                        f"reads{meant}; a misspelt field would be ignored: fix its name.")
        for field, values in self.fixed.items():
            if field in config and not any(_same(config[field], v) for v in values):
                shown = " or ".join(json.dumps(v) for v in values)
                raise CheckpointError(
                    f"{source}: {field} = {json.dumps(config[field])} changes what the model "
                    f"computes, and the {converter} converter "
                    f"builds only {field} = {shown}; convert a checkpoint with that value (or "
                    "without the field).")


def _same(value, wanted):
    """JSON equality that keeps booleans apart from numbers (`1` is not `true`)."""
    return type(value) is type(wanted) and value == wanted


NOT_A_DECODER = {"is_decoder": (False,), "add_cross_attention": (False,)}
TIED_OUTPUT = {"tie_word_embeddings": (True,)}

# BertModel (and the encoders written like it: RoBERTa, ELECTRA, ERNIE): absolute
# positions only, an encoder (no causal mask, no cross-attention), the output layer tied.
BERT = ConfigFields(
    honoured=("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size",
              "layer_norm_eps"),
    fixed={"position_embedding_type": ("absolute",), **NOT_A_DECODER, **TIED_OUTPUT})
# RoBERTa's positions start after its padding id.
ROBERTA = BERT.with_(honoured=("pad_token_id",))
# ERNIE: task-type embeddings (use_task_id) are checked against the tensors.
ERNIE = BERT.with_(honoured=("use_task_id",))
ELECTRA = BERT.with_(honoured=("embedding_size",))
# AlbertModel reads no is_decoder; one shared group of one layer is checked by its settings.
ALBERT = BERT.with_(honoured=("embedding_size", "num_hidden_groups", "inner_group_num"),
                    without=tuple(NOT_A_DECODER))
# GPT2Model: 1/sqrt(d) attention scale, not per layer, no upcast reordering.
GPT2 = ConfigFields(
    honoured=("vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "n_positions",
              "activation_function", "layer_norm_epsilon"),
    fixed={"scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,),
           "reorder_and_upcast_attn": (False,), "add_cross_attention": (False,),
           **TIED_OUTPUT})
OPENAI_GPT = ConfigFields(
    honoured=("vocab_size", "n_embd", "n_layer", "n_head", "n_positions", "afn",
              "layer_norm_epsilon"),
    fixed=TIED_OUTPUT)
GPT_NEO = ConfigFields(
    honoured=("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
              "max_position_embeddings", "attention_types", "attention_layers", "window_size",
              "activation_function", "layer_norm_epsilon"),
    fixed=TIED_OUTPUT)
# T5Model: always an encoder-decoder; the output layer tied or not as the tensors say.
T5 = ConfigFields(
    honoured=("vocab_size", "d_model", "d_ff", "d_kv", "num_layers", "num_decoder_layers",
              "num_heads", "feed_forward_proj", "tie_word_embeddings", "layer_norm_epsilon",
              "relative_attention_num_buckets", "relative_attention_max_distance",
              "scale_decoder_outputs", "dense_act_fn", "is_gated_act"),
    fixed={"is_encoder_decoder": (True,)})
# BartModel: post-LN (MBart's normalize_before), unscaled embeddings, shared sizes.
BART = ConfigFields(
    honoured=("vocab_size", "d_model", "encoder_layers", "decoder_layers",
              "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
              "decoder_ffn_dim", "max_position_embeddings", "activation_function"),
    fixed={"scale_embedding": (False,), "normalize_before": (False,),
           "add_final_layer_norm": (False,), "is_encoder_decoder": (True,), **TIED_OUTPUT})
# XLMModel: an encoder (is_encoder false raises there), learned positions.
XLM = ConfigFields(
    honoured=("vocab_size", "emb_dim", "n_layers", "n_heads", "n_langs", "use_lang_emb",
              "causal", "gelu_activation", "layer_norm_eps", "max_position_embeddings"),
    fixed={"sinusoidal_embeddings": (False,), "is_encoder": (True,), **TIED_OUTPUT})
# XLNetModel: untie_r is read from the tensors' shapes; one data direction.
XLNET = ConfigFields(
    honoured=("vocab_size", "d_model", "n_layer", "n_head", "d_head", "d_inner", "attn_type",
              "ff_activation", "mem_len", "clamp_len", "same_length", "layer_norm_eps",
              "untie_r"),
    fixed={"bi_data": (False,), **TIED_OUTPUT})
# allennlp / bilm-tf ELMo options, sections flattened ("lstm.dim"): both directions, the
# character CNN's ReLU over 261 character ids (+1 padding).
ELMO = ConfigFields(
    honoured=("lstm.projection_dim", "lstm.dim", "lstm.n_layers", "lstm.cell_clip",
              "lstm.proj_clip", "lstm.use_skip_connections", "char_cnn.filters",
              "char_cnn.n_highway", "char_cnn.embedding.dim", "char_cnn.max_characters_per_token"),
    fixed={"bidirectional": (True,), "char_cnn.activation": ("relu",),
           "char_cnn.n_characters": (262, 261)},
    # bilm-tf's training options (bin/train_elmo.py, training.py): the softmax and the
    # optimisation, not the representations.
    inert=("dropout", "all_clip_norm_val", "n_epochs", "n_train_tokens", "batch_size",
           "n_tokens_vocab", "unroll_steps", "n_negative_samples_batch",
           "share_embedding_softmax", "sample_softmax"))


# keras-hub backbones: their get_config() is their constructor's arguments, each read by
# the family's *_from_keras_hub; any other key (a newer keras-hub's) is refused.
KERAS_HUB_INERT = ("name", "trainable", "dtype", "dropout", "bias_initializer")
_KERAS_HUB_SIZES = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                    "intermediate_dim", "max_sequence_length")
KERAS_HUB_BERT = ConfigFields(honoured=_KERAS_HUB_SIZES + ("num_segments",))
KERAS_HUB_ROBERTA = ConfigFields(honoured=_KERAS_HUB_SIZES)
KERAS_HUB_ALBERT = ConfigFields(honoured=_KERAS_HUB_SIZES + (
    "num_segments", "embedding_dim", "num_groups", "num_inner_repetitions"))
KERAS_HUB_ELECTRA = ConfigFields(honoured=tuple(
    "vocab_size" if k == "vocabulary_size" else k for k in _KERAS_HUB_SIZES)
    + ("num_segments", "embedding_dim"))
KERAS_HUB_GPT2 = ConfigFields(honoured=_KERAS_HUB_SIZES)
KERAS_HUB_BART = ConfigFields(honoured=_KERAS_HUB_SIZES)
KERAS_HUB_XLNET = ConfigFields(honoured=_KERAS_HUB_SIZES[:-1] + (
    "activation", "kernel_initializer_range"))


def check_every_key(fields, config, source, inert=KERAS_HUB_INERT):
    """`fields.check`, and a CheckpointError for a key `fields` neither honours nor fixes
    (a config that is its class's constructor arguments: every key matters)."""
    known = set(fields.honoured) | set(fields.fixed) | set(inert)
    unknown = sorted(key for key in config if key not in known)
    if unknown:
        raise CheckpointError(
            f"{source}: {unknown[0]} = {json.dumps(config[unknown[0]], default=str)} is not "
            f"read by keras_ctx's converter{closest(unknown[0], known)}, and it may change "
            "what the model computes (a newer keras-hub's argument?); convert with the "
            "keras-hub version the converter knows, or tell keras_ctx about it.")
    fields.check(config, source, source)


def flattened(options, prefix=""):
    """{"section.key": value} of nested JSON objects (a table's field names)."""
    flat = {}
    for key, value in options.items():
        if isinstance(value, dict):
            flat.update(flattened(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat

