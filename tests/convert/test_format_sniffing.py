"""`detect_format` on damaged files (issue 55: malformed data raises): a file that names
its format (a checkpoint's config.json, an ELMo *_options.json, the source given) and is
not JSON is reported as malformed, naming the file and the parse error, never as "not
this format"; only a *.json that names no format is passed over."""

import json
import os

import pytest

from keras_ctx.convert import CheckpointError
from keras_ctx.convert.formats import detect_format
from keras_ctx.convert.kerashub import is_keras_hub_preset

TRUNCATED = '{"model_type": "bert", "hidden_size": 1'  # cut mid-file, as a failed download


def _parse_error(text):
    """json's own words for `text` (the ground truth the message must carry)."""
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(text)
    return str(caught.value)


def _write_files(directory, files):
    os.makedirs(directory, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    return str(directory)


def _malformed(path, text=TRUNCATED):
    return f"{path} is not valid JSON ({_parse_error(text)}): fix or re-download it."


@pytest.mark.parametrize("files", [
    {"config.json": TRUNCATED, "model.safetensors": ""},  # Hugging Face
    {"config.json": TRUNCATED, "metadata.json": "{}", "model.weights.h5": ""},  # keras-hub
], ids=["huggingface", "keras_hub"])
def test_a_truncated_config_json_is_malformed_not_an_unknown_format(tmp_path, files):
    source = _write_files(tmp_path / "checkpoint", files)
    with pytest.raises(CheckpointError) as caught:
        detect_format(source)
    assert str(caught.value) == _malformed(os.path.join(source, "config.json"))


def test_a_truncated_keras_hub_config_is_named_by_the_preset_check(tmp_path):
    # hf:// handles ask this first: before, a broken config.json read as "not a preset".
    source = _write_files(tmp_path / "preset", {"config.json": TRUNCATED, "metadata.json": "{}"})
    with pytest.raises(CheckpointError) as caught:
        is_keras_hub_preset(source)
    assert str(caught.value) == _malformed(os.path.join(source, "config.json"))


def test_a_keras_hub_config_that_is_not_an_object_is_no_preset(tmp_path):
    source = _write_files(tmp_path / "preset", {"config.json": "[1, 2]", "metadata.json": "{}"})
    assert is_keras_hub_preset(source) is False  # was an AttributeError (list.get)


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_truncated_elmo_options_file_is_malformed_not_an_unknown_format(tmp_path, where):
    text = '{"lstm": {"dim": 8, "n_layers": 2}, "char_cnn": {"filters": [[1, 4]'
    source = _write_files(tmp_path / "elmo", {"elmo_options.json": text, "elmo_weights.hdf5": ""})
    options = os.path.join(source, "elmo_options.json")
    with pytest.raises(CheckpointError) as caught:
        detect_format(options if where == "file" else source)
    assert str(caught.value) == _malformed(options, text)


def test_a_damaged_json_that_names_no_format_is_passed_over(tmp_path):
    # A Hugging Face directory's other files are read by its converter when it needs them.
    source = _write_files(tmp_path / "hf", {"config.json": '{"model_type": "bert"}',
                                            "model.safetensors": "", "trainer_state.json": "{"})
    assert detect_format(source) == "huggingface"


def test_when_no_format_fits_a_damaged_json_is_named(tmp_path):
    source = _write_files(tmp_path / "unknown", {"elmo.json": "{", "weights.hdf5": ""})
    with pytest.raises(CheckpointError) as caught:
        detect_format(source)
    message = str(caught.value)
    assert message.startswith(f"Cannot tell the format of {source} (")
    assert _malformed(os.path.join(source, "elmo.json"), "{").rstrip(".") in message
