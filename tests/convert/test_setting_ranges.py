"""The sizes, layer counts, dropout rates and epsilons a converter reads from a checkpoint's
config are checked by common/validation's rules (issue 55: one message per rule), each
error naming the file and the config field the value came from."""

import math

import pytest

from keras_ctx.convert import CheckpointError
from keras_ctx.convert.base import MAX_LAYERS, check_settings

# (setting, config field, what is allowed, refused values, accepted edge values)
RULES = [
    ("hidden_size", "d_model", "an integer in 1..2147483647",
     [0, -1, 1.5, True, "768", 2**31], [1, 2**31 - 1]),
    ("type_vocab_size", "type_vocab_size", "an integer in 0..2147483647",
     [-1, 2.0, False, 2**31], [0, 2]),
    ("num_layers", "num_hidden_layers", f"an integer in 1..{MAX_LAYERS}",
     [0, MAX_LAYERS + 1, 12.0, True], [1, MAX_LAYERS]),
    ("num_highway_layers", "char_cnn.n_highway", f"an integer in 0..{MAX_LAYERS}",
     [-1, MAX_LAYERS + 1], [0, 2]),
    ("dropout", "hidden_dropout_prob", "a number in [0, 1)",
     [-0.1, 1, 1.5, True, "0.1", math.inf], [0, 0.1]),  # NaN: check_finite_numbers
    ("layer_norm_epsilon", "layer_norm_eps", "a number in (0, 1)",
     [0, 1, -1e-12, True, "1e-12", math.inf], [1e-12, 0.5]),
]


def _setting_cases(column):
    return [(setting, value) for setting, *row in RULES for value in row[column]]


def _check_setting(setting, value):
    field = next(row[1] for row in RULES if row[0] == setting)
    check_settings({setting: value}, {field: value}, "config.json")


@pytest.mark.parametrize("setting, value", _setting_cases(2), ids=repr)
def test_a_config_value_out_of_range_is_refused_naming_its_field(setting, value):
    _, field, allowed, _, _ = next(row for row in RULES if row[0] == setting)
    with pytest.raises(CheckpointError) as caught:
        _check_setting(setting, value)
    assert str(caught.value) == (f"config.json: {field} = {value!r} is not {allowed}; fix the "
                                 "field.")


@pytest.mark.parametrize("setting, value", _setting_cases(3), ids=repr)
def test_a_config_value_at_the_edge_of_its_range_passes(setting, value):
    _check_setting(setting, value)  # raises nothing


def test_free_settings_and_absent_rates_pass():
    check_settings({"activation": "gelu", "dropout": None, "layer_norm_epsilon": None}, {},
                   "config.json")
