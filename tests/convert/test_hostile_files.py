"""Damaged and hostile checkpoint files end in one named CheckpointError (#38).

Every case is built here from a tiny exported BERT (or ELMo) and then edited:
sizes that would allocate gigabytes, NaN weights, substring-matched head
names, tokenizers that do not fit, JSON of the wrong shape, writers over a
user's files, and huggingface_hub's symlinked cache layout.
"""

import json
import os
import time

import keras_hub
import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file, save_file

from keras_ctx import backend
from keras_ctx.convert import (CheckpointError, from_allennlp, from_huggingface,
                               from_tf_checkpoint, to_allennlp, to_huggingface,
                               to_tf_checkpoint)
from keras_ctx.models import BertBackbone, ElmoBackbone

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(25)]


def two_layer_bert(tokenizer=True):
    backbone = BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_size=8,
                            intermediate_size=16, max_sequence_length=10)
    if tokenizer:
        backbone.tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB)
    return backbone


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return to_huggingface(two_layer_bert(), tmp_path_factory.mktemp("bert") / "hf")


def copy_of_export(exported, tmp_path):
    import shutil

    return shutil.copytree(exported, tmp_path / "copy")


def edit_config(directory, **fields):
    path = os.path.join(directory, "config.json")
    with open(path) as handle:
        config = json.load(handle)
    config.update(fields)
    with open(path, "w") as handle:
        json.dump(config, handle)


def edit_tensors(directory, **tensors):
    path = os.path.join(directory, "model.safetensors")
    values = dict(load_file(path))
    values.update(tensors)
    save_file(values, path)


# ------------------------------------------------------------ sizes before building

@pytest.mark.parametrize("field, value", [
    ("vocab_size", 10**12), ("hidden_size", 10**7), ("max_position_embeddings", 10**10),
    ("intermediate_size", 10**11), ("num_hidden_layers", 100000), ("num_hidden_layers", 3),
    ("vocab_size", 31), ("hidden_size", 30), ("intermediate_size", 30),
    ("num_attention_heads", 10**6), ("type_vocab_size", 10**9), ("vocab_size", -5),
    ("hidden_size", 8.5), ("vocab_size", True),
])
def test_sizes_that_do_not_fit_the_tensors_are_refused_before_building(exported, tmp_path,
                                                                       field, value):
    directory = copy_of_export(exported, tmp_path)
    edit_config(directory, **{field: value})
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=f"config.json.*{field} = {value}"):
        from_huggingface(directory)
    assert time.perf_counter() - start < 5  # nothing built


@pytest.mark.parametrize("field, value", [("vocab_size", 10**12), ("intermediate_size", 10**11),
                                          ("hidden_size", 10**7), ("num_hidden_layers", 100000),
                                          ("max_position_embeddings", 10**10)])
def test_tf_checkpoint_sizes_are_checked_before_building(tmp_path, field, value):
    directory = to_tf_checkpoint(two_layer_bert(), tmp_path / "tf")
    path = os.path.join(directory, "bert_config.json")
    with open(path) as handle:
        config = json.load(handle)
    with open(path, "w") as handle:
        json.dump(dict(config, **{field: value}), handle)
    with pytest.raises(CheckpointError, match=f"bert_config.json.*{field} = {value}"):
        from_tf_checkpoint(directory)


def test_elmo_options_sizes_are_checked_before_building(tmp_path):
    backbone = ElmoBackbone(projection_dim=4, lstm_units=8, num_layers=1,
                            filters=[[1, 4], [2, 4]], num_highway_layers=1,
                            character_embedding_dim=4)
    options, weights = tmp_path / "options.json", tmp_path / "weights.hdf5"
    to_allennlp(backbone, options, weights)
    from_allennlp(options, weights)  # the unedited pair loads
    saved = json.loads(options.read_text())
    for section, key, value in (("lstm", "dim", 10**9), ("lstm", "projection_dim", 10**9),
                                ("lstm", "n_layers", 100000), ("lstm", "n_layers", 2)):
        edited = json.loads(json.dumps(saved))
        edited[section][key] = value
        options.write_text(json.dumps(edited))
        with pytest.raises(CheckpointError, match=f"{section}.{key}.*{value}"):
            from_allennlp(options, weights)
    edited = json.loads(json.dumps(saved))
    edited["char_cnn"]["filters"] = [[1, 10**9]]
    options.write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match="char_cnn.filters"):
        from_allennlp(options, weights)


# ------------------------------------------------------------ finite numbers

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_weight_is_refused_naming_the_tensor(exported, tmp_path, bad):
    directory = copy_of_export(exported, tmp_path)
    table = load_file(os.path.join(directory, "model.safetensors"))[
        "encoder.layer.1.output.dense.weight"].copy()
    table[3, 2] = bad
    edit_tensors(directory, **{"encoder.layer.1.output.dense.weight": table})
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.weight.*NaN/Inf"):
        from_huggingface(directory)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_config_number_is_refused_naming_the_field(exported, tmp_path, text):
    directory = copy_of_export(exported, tmp_path)
    path = os.path.join(directory, "config.json")
    with open(path) as handle:
        config = handle.read()
    with open(path, "w") as handle:
        handle.write(config.replace('"layer_norm_eps": 1e-12', f'"layer_norm_eps": {text}'))
    with pytest.raises(CheckpointError, match="layer_norm_eps is .*finite"):
        from_huggingface(directory)


@pytest.mark.parametrize("field, value", [("hidden_dropout_prob", 5.0),
                                          ("hidden_dropout_prob", -0.1),
                                          ("layer_norm_eps", 0.0), ("layer_norm_eps", "x")])
def test_out_of_range_config_values_name_the_field(exported, tmp_path, field, value):
    directory = copy_of_export(exported, tmp_path)
    edit_config(directory, **{field: value})
    with pytest.raises(CheckpointError, match=f"config.json: {field} = "):
        from_huggingface(directory)


# ------------------------------------------------------------ exact names

def test_unknown_tensors_are_matched_by_exact_name(exported, tmp_path):
    directory = copy_of_export(exported, tmp_path)
    gate = "encoder.layer.0.attention.classifier_gate.weight"
    edit_tensors(directory, **{gate: np.ones((8, 8), "float32")})
    with pytest.raises(CheckpointError, match="classifier_gate"):
        from_huggingface(directory)
    # A real classification head is still known and dropped.
    directory = copy_of_export(exported, tmp_path / "head")
    edit_tensors(directory, **{"classifier.weight": np.ones((3, 8), "float32"),
                               "classifier.bias": np.ones(3, "float32")})
    assert from_huggingface(directory).num_layers == 2


# ------------------------------------------------------------ tokenizer files

def write_vocab(directory, tokens):
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(token + "\n" for token in tokens)


@pytest.mark.parametrize("tokens, message", [
    (VOCAB + ["extra"], "31 tokens but the embedding has 30 rows"),
    (VOCAB[:-1] + ["w3"], "token 'w3' is on lines 9 and 30"),
    (["[PAD]"] + VOCAB[2:], "no unknown token '\\[UNK\\]'"),
])
def test_vocab_txt_that_does_not_fit_is_refused_at_conversion(exported, tmp_path, tokens,
                                                              message):
    directory = copy_of_export(exported, tmp_path)
    write_vocab(directory, tokens)
    with pytest.raises(CheckpointError, match=message):
        from_huggingface(directory)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
@pytest.mark.parametrize("content, message", [
    (b"[1, 2]", "holds a JSON list, not an object"),
    (b'"bert"', "holds a JSON str, not an object"),
    (b'{"model_type": "bert\xff"}', "is not UTF-8"),
    (b"{", "is not valid JSON"),
])
def test_json_files_of_the_wrong_shape_are_named(exported, tmp_path, name, content, message):
    directory = copy_of_export(exported, tmp_path)
    with open(os.path.join(directory, name), "wb") as handle:
        handle.write(content)
    with pytest.raises(CheckpointError, match=f"{name} {message}"):
        from_huggingface(directory)


def test_bert_config_json_that_is_a_list_is_named(tmp_path):
    directory = to_tf_checkpoint(two_layer_bert(), tmp_path / "tf")
    with open(os.path.join(directory, "bert_config.json"), "w") as handle:
        handle.write("[]")
    with pytest.raises(CheckpointError, match="bert_config.json holds a JSON list"):
        from_tf_checkpoint(directory)


# ------------------------------------------------------------ writers

def test_to_huggingface_never_replaces_files_without_overwrite(tmp_path):
    directory = to_huggingface(two_layer_bert(), tmp_path / "hf")
    (tmp_path / "hf" / "README.md").write_text("mine")
    before = (tmp_path / "hf" / "model.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match="already holds config.json.*overwrite=True"):
        to_huggingface(two_layer_bert(), directory)
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == before
    # Over an export with a vocabulary, one without: the old vocab.txt must not stay.
    plain = two_layer_bert(tokenizer=False)
    to_huggingface(plain, directory, overwrite=True)
    assert not (tmp_path / "hf" / "vocab.txt").exists()
    assert not (tmp_path / "hf" / "tokenizer_config.json").exists()
    assert (tmp_path / "hf" / "README.md").read_text() == "mine"
    again = from_huggingface(directory)
    assert again.tokenizer is None
    np.testing.assert_array_equal(ops.convert_to_numpy(again.token_embedding.embeddings),
                                  ops.convert_to_numpy(plain.token_embedding.embeddings))
    assert not [n for n in os.listdir(directory) if ".partial" in n]


def test_to_tf_checkpoint_never_replaces_files_without_overwrite(tmp_path):
    directory = to_tf_checkpoint(two_layer_bert(), tmp_path / "tf")
    with pytest.raises(CheckpointError, match="already holds bert_config.json.*overwrite=True"):
        to_tf_checkpoint(two_layer_bert(), directory)
    plain = two_layer_bert(tokenizer=False)
    to_tf_checkpoint(plain, directory, overwrite=True)
    assert not (tmp_path / "tf" / "vocab.txt").exists()
    again = from_tf_checkpoint(directory)
    np.testing.assert_array_equal(ops.convert_to_numpy(again.token_embedding.embeddings),
                                  ops.convert_to_numpy(plain.token_embedding.embeddings))
    assert sorted(n for n in os.listdir(directory) if not n.startswith("bert_model")) == [
        "bert_config.json", "checkpoint"]


# ------------------------------------------------------------ huggingface_hub's cache

def hub_cache(exported, root):
    """exported as huggingface_hub lays out a sharded download: links into ../../blobs."""
    repo = root / "models--org--tiny"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    tensors = load_file(os.path.join(exported, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:10],
              "model-00002-of-00002.safetensors": names[10:]}
    weight_map = {}
    for index, (shard, part) in enumerate(shards.items()):
        save_file({n: tensors[n] for n in part}, str(blobs / f"hash{index}"))
        os.symlink(f"../../blobs/hash{index}", snapshot / shard)
        weight_map.update({n: shard for n in part})
    (blobs / "index").write_text(json.dumps({"weight_map": weight_map}))
    os.symlink("../../blobs/index", snapshot / "model.safetensors.index.json")
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        (blobs / name).write_bytes(open(os.path.join(exported, name), "rb").read())
        os.symlink(f"../../blobs/{name}", snapshot / name)
    return snapshot


def test_a_sharded_hub_cache_with_relative_symlinks_loads(exported, tmp_path):
    snapshot = hub_cache(exported, tmp_path)
    reference = from_huggingface(exported)
    loaded = from_huggingface(snapshot)
    for ours, theirs in zip(reference.weights, loaded.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs))


def test_a_shard_link_leaving_the_cache_is_refused(exported, tmp_path):
    snapshot = hub_cache(exported, tmp_path / "cache")
    outside = tmp_path / "elsewhere.safetensors"
    shard = snapshot / "model-00002-of-00002.safetensors"
    outside.write_bytes(shard.read_bytes())
    shard.unlink()
    os.symlink(outside, shard)
    with pytest.raises(CheckpointError, match="outside .*models--org--tiny; refused"):
        from_huggingface(snapshot)
    index = json.loads((snapshot / "model.safetensors.index.json").read_text())
    for escape in ("../../../elsewhere.safetensors", str(outside)):
        local = copy_of_export(exported, tmp_path / escape.replace("/", "_"))
        os.remove(os.path.join(local, "model.safetensors"))
        with open(os.path.join(local, "model.safetensors.index.json"), "w") as handle:
            json.dump({"weight_map": {k: escape for k in index["weight_map"]}}, handle)
        with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
            from_huggingface(local)


# ------------------------------------------------------------ serving

# None where this backend exports a SavedModel (TensorFlow, JAX), else its one-line reason.
SAVED_MODEL_REFUSAL = backend.export_refusal({}, None)


@pytest.mark.skipif(SAVED_MODEL_REFUSAL is not None, reason=str(SAVED_MODEL_REFUSAL))
def test_serve_examples_refuses_int64_minimum(tmp_path):
    import tensorflow as tf

    from keras_ctx.export import export_saved_model

    path = export_saved_model(two_layer_bert(tokenizer=False), str(tmp_path / "saved"),
                              sequence_length=4)
    examples = tf.saved_model.load(path).signatures["serve_examples"]

    def example(segment):
        features = {"token_ids": [5, 6, 7, 8], "padding_mask": [1] * 4,
                    "segment_ids": [0, 0, 0, segment]}
        return tf.train.Example(features=tf.train.Features(feature={
            k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
            for k, v in features.items()})).SerializeToString()

    assert examples(examples=tf.constant([example(1)]))["sequence_output"].shape == (1, 4, 8)
    for segment in (-(2**63), -(2**31) - 1, 2**31):
        with pytest.raises(tf.errors.InvalidArgumentError, match="outside int32"):
            examples(examples=tf.constant([example(segment)]))


def test_checkpoint_index_without_weight_map_or_escaping_the_directory(tmp_path):
    from keras_ctx.convert.huggingface import read_tensors
    from safetensors.numpy import save_file

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    save_file({"secret": np.ones(3, "float32")}, str(tmp_path / "outside.safetensors"))
    index = checkpoint / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match="weight_map"):
        read_tensors(str(checkpoint))
    index.write_text(json.dumps({"weight_map": {"secret": "../outside.safetensors"}}))
    with pytest.raises(ValueError, match="outside the checkpoint directory"):
        read_tensors(str(checkpoint))
