"""Every format reader checks what it loads (#44): dtypes, the largest token id, the
variable count, claimed sizes before building, and one-line errors for hostile files.

Each case is a real file of its format, written here from a tiny model and then
edited: an int8 word table, a bool LayerNorm weight, a GPT-2 vocab.json whose
largest id passes the table, a 2-layer `.weights.h5` into a 1-layer model, a
config claiming a 10**9 / 10**10 vocabulary over 30 stored rows.
"""

import json
import os
import zipfile

import h5py
import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file, save_file

from keras_ctx import runs
from keras_ctx.convert import (CheckpointError, from_allennlp, from_huggingface,
                               from_keras_hub_preset, from_tf_checkpoint, to_allennlp,
                               to_huggingface)
from keras_ctx.common import keras_files
from keras_ctx.common.errors import RunDirectoryError
from keras_ctx.models import BertBackbone, ElmoBackbone, GPTBackbone
from tests.convert.elmo_files import OPTIONS, elmo_datasets, write_elmo
from tests.convert.tf_checkpoint_files import BERT_CONFIG, bert_tf_variables, save_tf1_checkpoint
from tests.keras_archives import h5_datasets


def bert_of_layers(num_layers=1):
    return BertBackbone(vocabulary_size=30, num_layers=num_layers, num_heads=2, hidden_size=8,
                        intermediate_size=16, max_sequence_length=10)


def one_line(error):
    text = str(error.value)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------------ dtypes, every reader

@pytest.mark.parametrize("name, dtype", [
    ("embeddings.word_embeddings.weight", "int8"),
    ("embeddings.LayerNorm.weight", "bool"),
    ("encoder.layer.0.attention.self.query.weight", "int32"),
])
def test_safetensors_tensor_that_is_not_floating_is_refused(tmp_path, name, dtype):
    directory = to_huggingface(bert_of_layers(), tmp_path / "hf")
    path = os.path.join(directory, "model.safetensors")
    tensors = dict(load_file(path))
    tensors[name] = (tensors[name] * 10).astype(dtype)
    save_file(tensors, path)
    with pytest.raises(CheckpointError, match=rf"{name}.*dtype {dtype}.*dequantize") as error:
        from_huggingface(directory)
    one_line(error)


def test_float16_and_bfloat16_safetensors_still_load(tmp_path):
    ours = bert_of_layers()
    directory = to_huggingface(ours, tmp_path / "hf")
    path = os.path.join(directory, "model.safetensors")
    save_file({k: v.astype("float16") for k, v in load_file(path).items()}, path)
    loaded = from_huggingface(directory)
    table = ops.convert_to_numpy(loaded.token_embedding.embeddings)
    np.testing.assert_allclose(table, ops.convert_to_numpy(ours.token_embedding.embeddings),
                               atol=1e-3)


def test_tf_checkpoint_variable_that_is_not_floating_is_refused(tmp_path):
    variables = bert_tf_variables()
    variables["bert/embeddings/word_embeddings"] = np.round(
        variables["bert/embeddings/word_embeddings"] * 50).astype("int8")
    directory = save_tf1_checkpoint(tmp_path / "tf", variables, BERT_CONFIG,
                                    "bert_config.json", "bert_model.ckpt")
    with pytest.raises(CheckpointError, match=r"word_embeddings.*dtype int8") as error:
        from_tf_checkpoint(directory)
    one_line(error)


def test_elmo_hdf5_dataset_that_is_not_floating_is_refused(tmp_path):
    datasets = elmo_datasets()
    datasets["CNN_proj/b_proj"] = datasets["CNN_proj/b_proj"] > 0
    files = write_elmo(tmp_path, OPTIONS, datasets)
    with pytest.raises(CheckpointError, match=r"CNN_proj/b_proj.*dtype bool") as error:
        from_allennlp(*files)
    one_line(error)


def test_weights_h5_dataset_that_is_not_floating_is_refused(tmp_path):
    model = bert_of_layers()
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    with h5py.File(path, "r+") as handle:
        name = next(n for n in h5_datasets(handle) if handle[n].shape == (30, 8))
        value = handle[name][...]
        del handle[name]
        handle[name] = (value * 50).astype("int8")
    with pytest.raises(CheckpointError, match=r"dtype int8.*no int8 weight") as error:
        keras_files.load_weights(bert_of_layers(), path)
    one_line(error)


# ------------------------------------------------------------------ the largest token id

def test_gpt2_vocabulary_whose_largest_id_passes_the_table_is_refused(tmp_path):
    backbone = GPTBackbone(vocabulary_size=40, num_layers=1, num_heads=2, hidden_size=8,
                           intermediate_size=16, max_sequence_length=8, normalize_first=True)
    directory = to_huggingface(backbone, tmp_path / "gpt2")
    # 21 tokens, fewer than the 40 rows (what the old check counted), one of them id 5000.
    vocabulary = {chr(ord("a") + i): i for i in range(19)}
    vocabulary.update({"Ġ": 19, "Ġa": 5000})
    with open(os.path.join(directory, "vocab.json"), "w") as handle:
        json.dump(vocabulary, handle)
    with open(os.path.join(directory, "merges.txt"), "w") as handle:
        handle.write("#version: 0.2\nĠ a\n")
    with pytest.raises(CheckpointError,
                       match=r"embedding has 40 rows \(its largest id is 5000\)") as error:
        from_huggingface(directory)
    one_line(error)


# ------------------------------------------------------------------ partial loads

def test_deeper_weights_file_into_a_shallower_model_is_refused_unless_partial(tmp_path):
    two, one = bert_of_layers(2), bert_of_layers(1)
    path = str(tmp_path / "two.weights.h5")
    two.save_weights(path)
    # Keras alone loads it without a word (the extra layer's weights are ignored).
    with pytest.raises(CheckpointError, match=r"holds 39 weights but BertBackbone has 23"
                       r".*partial=True") as error:
        keras_files.load_weights(one, path)
    one_line(error)
    with pytest.raises(CheckpointError, match=r"holds 23 weights but BertBackbone has 39"):
        one.save_weights(str(tmp_path / "one.weights.h5"))
        keras_files.load_weights(two, str(tmp_path / "one.weights.h5"))
    keras_files.load_weights(one, path, partial=True)  # asked for: loads what matches
    np.testing.assert_array_equal(ops.convert_to_numpy(one.token_embedding.embeddings),
                                  ops.convert_to_numpy(two.token_embedding.embeddings))


def _save_run(tmp_path, backbone):
    run_dir = str(tmp_path / "run")
    runs.save_run(run_dir, {"model": "x", "family": "bert", "sequence_length": 8}, backbone)
    return run_dir


def _replace_in_keras(path, config=None, weights_from=None):
    """A `.keras` with its config.json and/or model.weights.h5 replaced."""
    with zipfile.ZipFile(path) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    if config is not None:
        entries["config.json"] = json.dumps(config).encode()
    if weights_from is not None:
        with zipfile.ZipFile(weights_from) as other:
            entries["model.weights.h5"] = other.read("model.weights.h5")
    with zipfile.ZipFile(path, "w") as target:
        for name, data in entries.items():
            target.writestr(name, data)


def test_run_backbone_with_another_models_weights_is_refused(tmp_path):
    run_dir = _save_run(tmp_path, bert_of_layers(1))
    deeper = str(tmp_path / "deeper.keras")
    bert_of_layers(2).save(deeper)
    _replace_in_keras(os.path.join(run_dir, runs.BACKBONE_FILE), weights_from=deeper)
    with pytest.raises(RunDirectoryError, match=r"holds 39 weights but BertBackbone has 23"):
        runs.load_run(run_dir)


# ------------------------------------------------------------------ claimed sizes

@pytest.mark.parametrize("vocabulary_size", [10**9, 10**10])
def test_keras_file_claiming_a_huge_vocabulary_is_refused_before_building(tmp_path,
                                                                          vocabulary_size):
    run_dir = _save_run(tmp_path, bert_of_layers())
    path = os.path.join(run_dir, runs.BACKBONE_FILE)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    config["config"]["vocabulary_size"] = vocabulary_size
    _replace_in_keras(path, config=config)
    # 10**10 x 8 float32 would be 320 GB: refused from the headers, nothing allocated.
    with pytest.raises(RunDirectoryError, match=rf"vocabulary_size = {vocabulary_size} is "
                       r"more than the longest stored weight axis \(30\)") as error:
        runs.load_run(run_dir)
    one_line(error)


@pytest.mark.parametrize("vocabulary_size", [10**9, 10**10])
def test_keras_hub_preset_claiming_a_huge_vocabulary_is_refused_before_building(
        tmp_path, vocabulary_size):
    keras_hub = pytest.importorskip("keras_hub")
    theirs = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                           hidden_dim=8, intermediate_dim=16,
                                           max_sequence_length=10)
    preset = str(tmp_path / "preset")
    theirs.save_to_preset(preset)
    with open(os.path.join(preset, "config.json")) as handle:
        config = json.load(handle)
    config["config"]["vocabulary_size"] = vocabulary_size
    with open(os.path.join(preset, "config.json"), "w") as handle:
        json.dump(config, handle)
    with pytest.raises(CheckpointError, match=rf"vocabulary_size = {vocabulary_size}") as error:
        from_keras_hub_preset(preset)
    one_line(error)


# ------------------------------------------------------------------ one-line errors

def test_to_huggingface_into_a_regular_file_is_one_line(tmp_path):
    target = tmp_path / "not_a_directory"
    target.write_text("the user's file")
    with pytest.raises(CheckpointError, match=r"is a file, not a directory") as error:
        to_huggingface(bert_of_layers(), target)
    one_line(error)
    assert target.read_text() == "the user's file"


def test_to_allennlp_into_a_directory_or_over_a_file_is_one_line(tmp_path):
    backbone = ElmoBackbone(projection_dim=4, lstm_units=8, num_layers=1,
                            filters=[[1, 4], [2, 4]], num_highway_layers=1,
                            character_embedding_dim=4)
    (tmp_path / "folder").mkdir()
    with pytest.raises(CheckpointError, match=r"folder is a directory") as error:
        to_allennlp(backbone, tmp_path / "options.json", tmp_path / "folder")
    one_line(error)
    mine = tmp_path / "weights.hdf5"
    mine.write_text("the user's file")
    with pytest.raises(CheckpointError, match=r"already exists; pass overwrite=True"):
        to_allennlp(backbone, tmp_path / "options.json", mine)
    assert mine.read_text() == "the user's file" and not (tmp_path / "options.json").exists()
    to_allennlp(backbone, tmp_path / "options.json", mine, overwrite=True)
    from_allennlp(tmp_path / "options.json", mine)  # what it wrote reads back


def test_keras_file_naming_subprocess_is_refused_in_one_line(tmp_path):
    run_dir = _save_run(tmp_path, bert_of_layers())
    path = os.path.join(run_dir, runs.BACKBONE_FILE)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    config["config"]["activation"] = {"module": "subprocess", "class_name": "function",
                                      "config": "check_call", "registered_name": "function"}
    _replace_in_keras(path, config=config)
    with pytest.raises(RunDirectoryError, match=r"cannot be loaded") as error:
        runs.load_run(run_dir)
    one_line(error)

