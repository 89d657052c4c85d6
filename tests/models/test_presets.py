"""Every preset against the parameter counts the issues quote from the papers' releases."""

import re

import pytest

from keras_ctx.cli import main
from keras_ctx.models.backbone import BackbonePreset
from keras_ctx.models.presets import count_parameters, get_preset, preset_config, preset_names

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
    assert main(["presets", "--family", "GPT-2"]) == 0  # gpt2's, case and "-" ignored
    out = capsys.readouterr().out
    assert "gpt2-xl" in out and "1,557,611,200" in out and "bert-base" not in out
    assert "GPT (Radford et al., 2018)" not in out  # the family gpt is another one


# Small enough to build in a test: their data counts are checked against the built model.
BUILT = ["bert-tiny", "bert-mini", "albert-base", "electra-small", "elmo-small",
         "awd-lstm-wt103"]


def _spec(name):
    from keras_ctx import families

    return families.of_preset(name).presets[name]


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_is_data_with_an_exact_integer_count(name):
    spec = _spec(name)
    assert isinstance(spec, BackbonePreset)
    assert type(spec.parameter_count) is int
    backbone_cls, config = preset_config(name)
    assert spec.parameter_count == backbone_cls.analytic_parameter_count(**config)
    assert get_preset(name).parameter_count == spec.parameter_count
    # The count is data, not a number inside the description.
    assert not re.search(r", [\d.]+[MB]( parameters)?$", spec.description), spec.description


@pytest.mark.parametrize("name", BUILT)
def test_small_preset_counts_equal_a_built_model(name):
    backbone_cls, config = preset_config(name)
    assert backbone_cls(**config).count_params() == _spec(name).parameter_count


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_data_counts_are_within_one_percent_of_the_published_ones(name):
    count = _spec(name).parameter_count
    assert abs(count / 1e6 - PUBLISHED[name]) / PUBLISHED[name] < 0.01, (name, count)


def test_every_backbone_class_counts_in_one_classmethod_form():
    import inspect

    from keras_ctx import models

    for cls in {get_preset(name).backbone_cls for name in preset_names()}:
        method = inspect.getattr_static(cls, "analytic_parameter_count", None)
        owner = next(c for c in cls.__mro__ if "analytic_parameter_count" in vars(c))
        assert isinstance(vars(owner)["analytic_parameter_count"], classmethod), cls
        assert method is not None and owner is not models.Backbone
