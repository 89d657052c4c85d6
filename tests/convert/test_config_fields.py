"""Every config field that changes what a checkpoint's model computes is honoured or refused
in one line naming the file, the field and the value (keras_ctx/convert/config_fields.py),
and a key given twice in a config is named."""

import json

import pytest

from keras_ctx import registry
from keras_ctx.convert import CheckpointError, from_huggingface
from tests.convert.hub_snapshots import snapshot_with_missing_blob

ENCODER = {"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 10}
# The smallest config of each model_type that builds its backbone (no tensors).
CONFIGS = {
    "bert": dict(ENCODER, model_type="bert"),
    "roberta": dict(ENCODER, model_type="roberta", max_position_embeddings=12),
    "ernie": dict(ENCODER, model_type="ernie"),
    "electra": dict(ENCODER, model_type="electra", embedding_size=8),
    "albert": dict(ENCODER, model_type="albert", embedding_size=8),
    "gpt2": {"model_type": "gpt2", "vocab_size": 30, "n_embd": 8, "n_layer": 1, "n_head": 2,
             "n_positions": 10},
    "openai-gpt": {"model_type": "openai-gpt", "vocab_size": 30, "n_embd": 8, "n_layer": 1,
                   "n_head": 2, "n_positions": 10},
    "gpt_neo": {"model_type": "gpt_neo", "vocab_size": 30, "hidden_size": 8, "num_layers": 1,
                "num_heads": 2, "attention_types": [[["global"], 1]],
                "max_position_embeddings": 10},
    "t5": {"model_type": "t5", "vocab_size": 30, "d_model": 8, "d_ff": 16, "num_layers": 1,
           "num_heads": 2, "d_kv": 4},
    "bart": {"model_type": "bart", "vocab_size": 30, "d_model": 8, "encoder_layers": 1,
             "decoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 16,
             "max_position_embeddings": 10},
    "xlm": {"model_type": "xlm", "vocab_size": 30, "emb_dim": 8, "n_layers": 1, "n_heads": 2,
            "max_position_embeddings": 10},
    "xlnet": {"model_type": "xlnet", "vocab_size": 30, "d_model": 8, "n_layer": 1,
              "n_head": 2, "d_inner": 16},
}
CONFIGS["mt5"] = dict(CONFIGS["t5"], model_type="mt5")

# A value of each field that makes the reference model compute something else.
OTHER = {"position_embedding_type": "relative_key", "is_decoder": True,
         "add_cross_attention": True, "tie_word_embeddings": False,
         "scale_attn_weights": False, "scale_attn_by_inverse_layer_idx": True,
         "reorder_and_upcast_attn": True, "is_encoder_decoder": False,
         "scale_embedding": True, "normalize_before": True, "add_final_layer_norm": True,
         "sinusoidal_embeddings": True, "is_encoder": False, "bi_data": True}


def _convert(config, tmp_path):
    source = str(tmp_path / "config.json")
    return registry.huggingface(config["model_type"])[1].convert(config, None, source=source)


def _fields(model_type):
    return registry.huggingface(model_type)[1].convert.config_fields


FIXED = [(t, field) for t in CONFIGS for field in _fields(t).fixed]


def test_every_model_type_has_a_table_and_a_case():
    assert set(CONFIGS) == set(registry.huggingface_model_types())
    assert {field for _, field in FIXED} <= set(OTHER)


@pytest.mark.parametrize("model_type, field", FIXED, ids=[f"{t}-{f}" for t, f in FIXED])
def test_a_field_the_backbone_does_not_compute_is_refused_naming_file_field_and_value(
        model_type, field, tmp_path):
    config = dict(CONFIGS[model_type], **{field: OTHER[field]})
    with pytest.raises(CheckpointError) as caught:
        _convert(config, tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'config.json'}: {field} = "
                              f"{json.dumps(OTHER[field])} changes what the model computes")
    # The reference's default (the table's first value) converts.
    default = _fields(model_type).fixed[field][0]
    _convert(dict(CONFIGS[model_type], **{field: default}), tmp_path)


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_the_smallest_config_converts(model_type, tmp_path):
    assert _convert(dict(CONFIGS[model_type]), tmp_path).count_params() > 0


class _Reads(dict):
    """A config that records which fields were read."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


SETTINGS = {
    "bert": "keras_ctx.models.bert.convert:bert_config_from_huggingface",
    "roberta": "keras_ctx.models.roberta.convert:roberta_config_from_huggingface",
    "electra": "keras_ctx.models.electra.convert:electra_config_from_huggingface",
    "albert": "keras_ctx.models.albert.convert:albert_config_from_huggingface",
    "gpt2": "keras_ctx.models.gpt.convert_gpt2:gpt2_config_from_huggingface",
    "gpt_neo": "keras_ctx.models.gpt.convert_gpt_neo:gpt_neo_config_from_huggingface",
    "t5": "keras_ctx.models.t5.convert:t5_config_from_huggingface",
    "bart": "keras_ctx.models.bart.convert:bart_config_from_huggingface",
    "xlm": "keras_ctx.models.xlm.convert:xlm_config_from_huggingface",
    "xlnet": "keras_ctx.models.xlnet.convert:xlnet_config_from_huggingface",
}


@pytest.mark.parametrize("model_type", sorted(SETTINGS))
def test_the_fields_a_table_calls_honoured_are_read_by_its_settings(model_type):
    """The table is not a list of hopes: every honoured field that has no other reader
    (tensor shapes, the tokenizer's offset) is read by the settings function."""
    import importlib

    module, name = SETTINGS[model_type].split(":")
    settings = getattr(importlib.import_module(module), name)
    config = _Reads(CONFIGS[model_type])
    settings(config)
    read_elsewhere = {"untie_r", "scale_decoder_outputs", "tie_word_embeddings",
                      "attention_layers", "pad_token_id", "decoder_attention_heads",
                      "decoder_ffn_dim"}
    assert set(_fields(model_type).honoured) - read_elsewhere <= config.read


def test_a_key_given_twice_in_config_json_is_named(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "bert", "hidden_act": "gelu", "vocab_size": 30, "hidden_act": "relu"}')
    with pytest.raises(CheckpointError, match=r"config\.json: the key 'hidden_act' appears "
                                              r"twice in one object"):
        from_huggingface(tmp_path)


def test_a_key_given_twice_in_a_safetensors_header_is_named(tmp_path):
    from keras_ctx.convert.huggingface import read_safetensors_header

    header = b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, ' \
             b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    with pytest.raises(CheckpointError, match="the key 'a' appears twice"):
        read_safetensors_header(str(path))


def test_a_missing_blob_behind_a_cache_link_is_named(tmp_path):
    snapshot, blob = snapshot_with_missing_blob(tmp_path, "config.json")
    with pytest.raises(CheckpointError) as caught:
        from_huggingface(snapshot)
    message = str(caught.value)
    assert message.startswith(f"{snapshot / 'config.json'} is a link to {blob}, which is "
                              "missing: the blob")
    assert "no config.json" not in message


@pytest.mark.parametrize("options, field, value", [
    ({"bidirectional": False}, "bidirectional", "false"),
    ({"char_cnn": {"activation": "tanh"}}, "char_cnn.activation", '"tanh"'),
    ({"char_cnn": {"n_characters": 300}}, "char_cnn.n_characters", "300"),
])
def test_elmo_options_that_change_the_computation_are_refused(tmp_path, options, field, value):
    """bilm-tf's options: `bidirectional: false` is a forward-only language model."""
    from keras_ctx.convert import from_allennlp

    full = {"lstm": {"projection_dim": 4, "dim": 8, "n_layers": 1},
            "char_cnn": {"filters": [[1, 4]], "n_highway": 1, "embedding": {"dim": 4}}}
    for key, item in options.items():
        if isinstance(item, dict):
            full[key].update(item)
        else:
            full[key] = item
    path = tmp_path / "options.json"
    path.write_text(json.dumps(full))
    with pytest.raises(CheckpointError) as caught:
        from_allennlp(path, tmp_path / "weights.hdf5")
    assert str(caught.value).startswith(f"{path}: {field} = {value} changes what the model "
                                        "computes, and the ELMo options converter")


def test_t5s_stored_dense_act_fn_and_is_gated_act_are_what_the_model_computes(tmp_path):
    """transformers' T5Config sets a stored dense_act_fn / is_gated_act after deriving them
    from feed_forward_proj, so the stored ones win (save_pretrained writes them)."""
    config = dict(CONFIGS["t5"], feed_forward_proj="relu", dense_act_fn="gelu_new",
                  is_gated_act=True)
    backbone = _convert(config, tmp_path)
    assert (backbone.activation, backbone.gated_feedforward) == ("gelu_approximate", True)
    plain = _convert(dict(CONFIGS["t5"], feed_forward_proj="gated-gelu"), tmp_path)
    assert (plain.activation, plain.gated_feedforward) == ("gelu_approximate", True)


@pytest.mark.parametrize("model_type, field", [
    ("gpt2", "activation_function"), ("openai-gpt", "afn"), ("gpt_neo", "activation_function"),
    ("xlnet", "ff_activation"), ("bert", "hidden_act"), ("t5", "dense_act_fn")])
def test_an_activation_we_do_not_compute_is_refused_naming_its_field(model_type, field,
                                                                      tmp_path):
    with pytest.raises(CheckpointError) as caught:
        _convert(dict(CONFIGS[model_type], **{field: "swish"}), tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'config.json'}: Activation 'swish' "
                                        f"(config.json {field}) is not supported")


def test_every_argument_of_each_keras_hub_backbone_is_read_or_inert():
    """Ground truth: the installed keras-hub's constructors (get_config returns them)."""
    import inspect

    import keras_hub

    from keras_ctx.convert.config_fields import KERAS_HUB_INERT

    for family in map(registry.get, registry.names()):
        for spec in family.keras_hub:
            arguments = inspect.signature(getattr(keras_hub.models, spec.class_name)).parameters
            fields = spec.convert.config_fields
            unread = set(arguments) - {"self", "kwargs"} - set(fields.honoured) - set(
                KERAS_HUB_INERT)
            assert not unread, (spec.class_name, unread)


def test_a_keras_hub_config_key_the_converter_does_not_read_is_refused(monkeypatch):
    import keras_hub

    from keras_ctx.convert import from_keras_hub

    backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                             hidden_dim=8, intermediate_dim=16,
                                             max_sequence_length=10)
    config = dict(backbone.get_config(), layer_norm_epsilon=1e-5)  # a newer keras-hub's
    monkeypatch.setattr(backbone, "get_config", lambda: config)
    with pytest.raises(CheckpointError, match=r"^keras-hub BertBackbone: layer_norm_epsilon = "
                                              r"1e-05 is not read by keras_ctx's converter"):
        from_keras_hub(backbone)
