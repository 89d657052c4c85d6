"""A damaged file is named itself, not another file of its checkpoint (issue 53)."""

import os
import shutil

import keras_hub
import pytest

from keras_ctx.convert import CheckpointError, from_tf_checkpoint, to_tf_checkpoint
from keras_ctx.models import BertBackbone

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(25)]
DATA = "bert_model.ckpt.data-00000-of-00001"


@pytest.fixture(scope="module")
def tf_checkpoint(tmp_path_factory):
    backbone = BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2, hidden_size=8,
                            intermediate_size=16, max_sequence_length=10)
    backbone.tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB)
    return to_tf_checkpoint(backbone, tmp_path_factory.mktemp("tf") / "bert")


def _copy(tf_checkpoint, tmp_path):
    return shutil.copytree(tf_checkpoint, tmp_path / "copy")


@pytest.mark.parametrize("name", [DATA, "bert_model.ckpt.index"])
def test_a_truncated_tf_checkpoint_file_is_named_itself(tf_checkpoint, tmp_path, name):
    """A truncated data file was reported as the prefix `bert_model.ckpt` (no such file)."""
    directory = _copy(tf_checkpoint, tmp_path)
    path = directory / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError) as caught:
        from_tf_checkpoint(directory)
    assert str(caught.value).startswith(f"{path} is not a readable TensorFlow checkpoint (")


def test_two_checkpoints_without_a_checkpoint_file_are_refused_naming_them(tf_checkpoint,
                                                                          tmp_path):
    """The first index in sorted order was read without a word."""
    directory = _copy(tf_checkpoint, tmp_path)
    os.remove(directory / "checkpoint")
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(directory / ("bert_model.ckpt" + suffix), directory / ("a.ckpt" + suffix))
    with pytest.raises(CheckpointError, match=r"holds 2 TensorFlow checkpoints \(a\.ckpt\.index, "
                                              r"bert_model\.ckpt\.index\) and no `checkpoint`"):
        from_tf_checkpoint(directory)


def test_an_index_that_puts_a_tensor_in_the_wrong_shard_is_named(tmp_path):
    """Such a checkpoint was refused later as 'has no tensor ...; it does not match its
    config.json's model_type' when a tensor was in no shard, or read without a word."""
    import json

    from safetensors.numpy import save_file

    from keras_ctx.convert import from_huggingface
    from tests.convert.hf_checkpoints import XLNET, xlnet_tensors

    tensors = xlnet_tensors()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    (tmp_path / "config.json").write_text(json.dumps(XLNET))
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / shard))
    weight_map = {k: s for s, keys in shards.items() for k in keys}
    weight_map[names[0]] = "model-00002-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError) as caught:
        from_huggingface(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'model.safetensors.index.json'} lists tensor {names[0]!r} in "
        f"model-00002-of-00002.safetensors, but it is in "
        f"{tmp_path / 'model-00001-of-00002.safetensors'}: the index and its shards are of "
        "different downloads; download the checkpoint again.")
