"""Every preset against the parameter counts the issues quote from the papers' releases."""

import pytest

from keras_ctx.cli import main
from keras_ctx.models.presets import count_parameters, preset_config, preset_names

PUBLISHED = {  # millions, as quoted in the issues (released configurations)
    "bert-base": 109.5, "bert-large": 335.1, "roberta-base": 124.6, "roberta-large": 355.4,
    "albert-base": 11.7, "albert-large": 17.7, "albert-xlarge": 58.7, "albert-xxlarge": 222.6,
    "xlnet-base": 116.7, "xlnet-large": 360.3, "elmo-small": 13.6, "elmo-medium": 28.0,
    "elmo-original": 93.6, "gpt": 116.5, "gpt2": 124.4, "gpt2-medium": 354.8,
    "gpt2-large": 774.0, "gpt2-xl": 1560.0, "t5-small": 60.5, "t5-base": 222.9,
    "t5-3b": 2850.0, "t5-11b": 11300.0,  # Raffel et al. 2020: 2.85B / 11.3B (tied, HF count)
    "bart-base": 139.4, "bart-large": 406.3,
    # ULMFiT's fastai WT-103 model, PyTorch's two LSTM biases per layer and the
    # decoder bias included (tests/models/test_awd_lstm.py counts it by hand).
    "awd-lstm-wt103": 44.27,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_are_within_one_percent_of_the_published_ones(name):
    backbone_cls, config = preset_config(name)
    count = count_parameters(backbone_cls, config)
    assert abs(count / 1e6 - PUBLISHED[name]) / PUBLISHED[name] < 0.01, (name, count)


def test_every_published_model_has_a_preset():
    assert set(PUBLISHED) <= set(preset_names())


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="Unknown preset 'bert-gigantic'.*bert-base"):
        preset_config("bert-gigantic")


def test_presets_command_prints_counts(capsys):
    assert main(["presets", "--family", "gpt"]) == 0
    out = capsys.readouterr().out
    assert "gpt2-xl" in out and "1,557,611,200" in out and "bert-base" not in out
