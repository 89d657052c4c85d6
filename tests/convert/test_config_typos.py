"""A misspelt field of a converted config raises, naming the one meant (issue 55: typos in
config keys raise). An ELMo options file's optional fields (proj_clip, cell_clip,
use_skip_connections, ...) were read with a default: a misspelt one built another model
without a word."""

import json

import pytest

from keras_ctx.convert import CheckpointError
from tests.convert import elmo_files


def _with(section, key, value):
    options = json.loads(json.dumps(elmo_files.OPTIONS))
    (options[section] if section else options)[key] = value
    return options


@pytest.mark.parametrize("section, typo, meant", [
    ("lstm", "proj_clp", "lstm.proj_clip"),
    ("lstm", "use_skip_connection", "lstm.use_skip_connections"),
    ("char_cnn", "n_highways", "char_cnn.n_highway"),
])
def test_a_misspelt_elmo_option_is_refused(tmp_path, section, typo, meant):
    from keras_ctx.models.elmo.convert import from_allennlp

    options_file, weights = elmo_files.write_elmo(
        tmp_path, _with(section, typo, 3), elmo_files.elmo_datasets())
    with pytest.raises(CheckpointError) as caught:
        from_allennlp(options_file, weights)
    assert str(caught.value) == (
        f"{options_file}: {section}.{typo} is not a field the ELMo options converter reads "
        f"(did you mean '{meant}'?); a misspelt field would be ignored: fix its name.")


def test_bilm_tf_training_options_and_unrelated_fields_convert(tmp_path):
    from keras_ctx.models.elmo.convert import from_allennlp

    # bilm-tf's bin/train_elmo.py writes its training settings into the options file.
    options = dict(elmo_files.OPTIONS, dropout=0.1, all_clip_norm_val=10.0, n_epochs=10,
                   n_train_tokens=768648884, batch_size=128, n_tokens_vocab=793471,
                   unroll_steps=20, n_negative_samples_batch=8192, comment="ours")
    backbone = from_allennlp(*elmo_files.write_elmo(tmp_path, options,
                                                    elmo_files.elmo_datasets()))
    assert backbone.get_config()["projection_clip"] == 3.0


def test_a_misspelt_keras_hub_argument_names_the_one_meant(monkeypatch):
    import keras_hub

    from keras_ctx.convert import from_keras_hub

    backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                             hidden_dim=8, intermediate_dim=16,
                                             max_sequence_length=10)
    config = dict(backbone.get_config(), num_segment=2)
    monkeypatch.setattr(backbone, "get_config", lambda: config)
    with pytest.raises(CheckpointError) as caught:
        from_keras_hub(backbone)
    assert str(caught.value).startswith(
        "keras-hub BertBackbone: num_segment = 2 is not read by keras_ctx's converter (did "
        "you mean 'num_segments'?), and it may change what the model computes")
