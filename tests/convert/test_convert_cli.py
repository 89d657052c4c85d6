"""`keras-ctx convert SRC DEST`: format detection and run directories that load back."""

import json
import os

import numpy as np
import pytest
from keras import ops

from keras_ctx import runs
from keras_ctx.convert import CheckpointError
from keras_ctx.convert.formats import convert, detect_format
from tests.convert import elmo_files, hf_checkpoints, tf_checkpoint_files


def _same_outputs(a, b, inputs, key="sequence_output"):
    np.testing.assert_allclose(ops.convert_to_numpy(a(inputs)[key]),
                               ops.convert_to_numpy(b(inputs)[key]), atol=1e-6)


def test_huggingface_and_tensorflow_sources(tmp_path):
    hf = hf_checkpoints.write_checkpoint(tmp_path / "hf", hf_checkpoints.XLNET,
                                           hf_checkpoints.xlnet_tensors())
    assert detect_format(hf) == "huggingface"
    info = convert(hf, tmp_path / "run_hf")
    assert info["family"] == "xlnet" and info["source_format"] == "huggingface"
    loaded_info, backbone, tokenizer = runs.load_run(str(tmp_path / "run_hf"))
    assert {k: loaded_info[k] for k in info} == info and tokenizer is None
    from keras_ctx.convert import from_huggingface

    inputs = {"token_ids": np.array([[3, 4, 5]], "int32"), "padding_mask": np.ones((1, 3), "int32"),
              "segment_ids": np.zeros((1, 3), "int32")}
    _same_outputs(backbone, from_huggingface(hf), inputs)

    tf_dir = tf_checkpoint_files.save_tf1_checkpoint(
        tmp_path / "tf", tf_checkpoint_files.bert_tf_variables(),
        tf_checkpoint_files.BERT_CONFIG, "bert_config.json", "bert_model.ckpt")
    with open(os.path.join(tf_dir, "vocab.txt"), "w") as handle:
        handle.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n")
    assert detect_format(tf_dir) == "tensorflow"
    info = convert(tf_dir, tmp_path / "run_tf")
    assert info["family"] == "bert" and info["sequence_length"] == 12  # the position table
    _, backbone, tokenizer = runs.load_run(str(tmp_path / "run_tf"))
    assert tokenizer("hello world").tolist() == [4, 5]
    assert backbone.num_layers == 2

    # ELECTRA's TF checkpoints have no config file: recognised by their variables.
    electra = tf_checkpoint_files.save_tf1_checkpoint(
        tmp_path / "electra", tf_checkpoint_files.electra_tf_variables(), {}, "x.json",
        "electra_small")
    os.remove(os.path.join(electra, "x.json"))
    assert detect_format(electra) == "tensorflow"
    assert convert(electra, tmp_path / "run_electra")["family"] == "electra"


def test_allennlp_and_keras_hub_sources(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    source = tmp_path / "elmo"
    source.mkdir()
    elmo_files.write_elmo(source, elmo_files.OPTIONS, elmo_files.elmo_datasets())
    assert detect_format(str(source)) == "allennlp"
    assert detect_format(str(source / "options.json")) == "allennlp"
    info = convert(source, tmp_path / "run_elmo")
    assert info["family"] == "elmo"
    _, backbone, _ = runs.load_run(str(tmp_path / "run_elmo"))
    from keras_ctx.models.elmo.convert import from_allennlp

    ids = np.random.default_rng(0).integers(1, 262, (1, 3, 8)).astype("int32")
    _same_outputs(backbone, from_allennlp(source / "options.json", source / "weights.hdf5"),
                  {"character_ids": ids})

    preset = str(tmp_path / "preset")
    keras_hub.models.AlbertBackbone(vocabulary_size=30, num_layers=2, num_heads=2,
                                    embedding_dim=4, hidden_dim=8, intermediate_dim=16,
                                    max_sequence_length=10).save_to_preset(preset)
    assert detect_format(preset) == "keras_hub"
    info = convert(preset, tmp_path / "run_hub")
    assert info["family"] == "albert"
    _, backbone, _ = runs.load_run(str(tmp_path / "run_hub"))
    assert type(backbone).__name__ == "AlbertBackbone"


def test_unknown_sources_fail_clearly(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        detect_format(tmp_path / "nothing")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="Cannot tell the format"):
        convert(tmp_path, tmp_path / "out")
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(CheckpointError, match="config.json is not valid JSON"):
        detect_format(tmp_path)
    with pytest.raises(CheckpointError, match="Cannot tell the format"):
        detect_format(tmp_path / "notes.txt")
    options = tmp_path / "elmo_options.json"
    options.write_text(json.dumps(elmo_files.OPTIONS))
    with pytest.raises(CheckpointError, match="No hdf5 weights"):
        detect_format(options)
