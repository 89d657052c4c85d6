"""Property test (hypothesis): fuzzed config.json values and safetensors headers end in a
correct load or one CheckpointError, never another exception or a large allocation (#38)."""

import json
import shutil
import struct
import tracemalloc

import keras_hub
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from keras_ctx.convert.huggingface import read_safetensors_header
from keras_ctx.models import BertBackbone

FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
          "num_attention_heads", "max_position_embeddings", "type_vocab_size",
          "hidden_dropout_prob", "layer_norm_eps", "hidden_act", "model_type")
VALUES = st.one_of(st.integers(-2**40, 2**64), st.floats(allow_nan=True, allow_infinity=True),
                   st.booleans(), st.none(), st.text(max_size=5),
                   st.lists(st.integers(0, 9), max_size=3), st.sampled_from([8, 16, 30, 2, 10]))
FUZZ = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    backbone = BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_size=8,
                            intermediate_size=16, max_sequence_length=10)
    backbone.tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=["[PAD]", "[UNK]"] + [f"w{i}" for i in range(28)])
    return to_huggingface(backbone, tmp_path_factory.mktemp("fuzz") / "hf")


def load_bounded(directory):
    """from_huggingface, asserting it allocates no more than a few times the checkpoint."""
    tracemalloc.start()
    try:
        return from_huggingface(directory)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 50_000_000, peak  # the checkpoint is 7 KB


@FUZZ
@given(edits=st.dictionaries(st.sampled_from(FIELDS), VALUES, min_size=1, max_size=3))
def test_fuzzed_config_values_load_correctly_or_raise_checkpoint_error(exported, tmp_path,
                                                                       edits):
    directory = tmp_path / "case"
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(exported, directory)
    with open(directory / "config.json") as handle:
        config = json.load(handle)
    config.update(edits)
    with open(directory / "config.json", "w") as handle:
        json.dump(config, handle)
    try:
        backbone = load_bounded(directory)
    except CheckpointError as error:
        assert "\n" not in str(error)
        return
    # A load must be the model the tensors describe.
    assert (backbone.vocabulary_size, backbone.hidden_size, backbone.num_layers,
            backbone.intermediate_size) == (30, 8, 2, 16)


ENTRY = st.fixed_dictionaries({
    "dtype": st.sampled_from(["F32", "F16", "BF16", "I64", "X9", 3]),
    "shape": st.one_of(st.lists(st.integers(-2, 2**62), max_size=3), st.text(max_size=2)),
    "data_offsets": st.one_of(st.lists(st.integers(-2, 2**63), min_size=2, max_size=2),
                              st.none()),
})


@FUZZ
@given(entry=ENTRY, length_delta=st.sampled_from([0, 0, 0, 1, -1, 2**40]))
def test_fuzzed_safetensors_headers_are_refused_without_allocating(exported, tmp_path, entry,
                                                                   length_delta):
    directory = tmp_path / "case"
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(exported, directory)
    path = directory / "model.safetensors"
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    name = "encoder.layer.0.output.dense.weight"
    header[name] = entry
    text = json.dumps(header).encode()
    body = raw[8 + length:]
    path.write_bytes(struct.pack("<Q", max(0, len(text) + length_delta)) + text + body)
    try:
        shapes = read_safetensors_header(str(path))
    except CheckpointError as error:
        assert "\n" not in str(error)
        return
    assert shapes[name] == tuple(entry["shape"])
    try:
        load_bounded(directory)
    except CheckpointError:
        pass
