"""`peft.replace_adapter`: MAD-X's zero-shot swap of a language adapter under a task
adapter, against the same stack built by loading the adapters in order."""

import keras
import numpy as np
import pytest

from keras_ctx import models, peft
from tests.execution import few_calls

SIZES = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32,
             vocabulary_size=30, max_sequence_length=16)


def _one_layer_bert(seed=0):
    keras.utils.set_random_seed(seed)
    return models.from_preset("bert-tiny", **SIZES)


def _drawn(model, name, seed):
    """Adapter `name`'s weights drawn from N(0, 0.3): far from the near-identity start."""
    rng = np.random.default_rng(seed)
    for variable in peft.adapter_variables(model, name).values():
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))


def _language_file(tmp_path, name, seed, config="madx_language", backbone=None, **overrides):
    """Adapter `name` (weights drawn) saved alone from `backbone` (default a new one)."""
    backbone = backbone or _one_layer_bert()
    peft.add_adapter(backbone, name, config, activate=False, **overrides)
    _drawn(backbone, name, seed)
    path = str(tmp_path / f"{name}.safetensors")
    peft.save_adapter(backbone, name, path)
    return path


def _stack_outputs(backbone):
    ids = np.random.default_rng(1).integers(1, 30, size=(2, 8)).astype("int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
    # One compiled call with the weights as they are now (a new one after each swap).
    forward = few_calls(lambda x: backbone(x)["sequence_output"])
    return keras.ops.convert_to_numpy(forward(inputs))


def test_the_new_adapter_takes_the_old_ones_place_under_the_task_adapter(tmp_path):
    backbone = _one_layer_bert()  # the files are saved from it before it has any adapter switched on
    en = _language_file(tmp_path, "en", 1, backbone=backbone)
    de = _language_file(tmp_path, "de", 2, backbone=backbone, reduction_factor=4)
    ner = _language_file(tmp_path, "ner", 3, config="madx_task", backbone=backbone)
    for name in ("en", "de", "ner"):
        peft.delete_adapter(backbone, name)
    peft.load_adapter(backbone, en)
    peft.load_adapter(backbone, ner)
    english = _stack_outputs(backbone)
    assert peft.replace_adapter(backbone, "en", de) == "de"
    assert peft.adapter_names(backbone) == ["de", "ner"]
    assert peft.active_adapters(backbone) == ["de", "ner"]
    german = _stack_outputs(backbone)
    assert np.abs(german - english).max() > 1e-2
    by_hand = _one_layer_bert()  # the stack loaded in order: German, then the task adapter
    peft.load_adapter(by_hand, de)
    peft.load_adapter(by_hand, ner)
    np.testing.assert_allclose(german, _stack_outputs(by_hand), rtol=1e-5, atol=1e-6)
    # Its state rebuilds the same stack (what a .keras file keeps).
    assert peft.adapter_state(backbone)["active"] == ["de", "ner"]


def test_an_adapter_of_the_same_name_replaces_the_weights_in_place(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    old, new = _language_file(first, "en", 1), _language_file(second, "en", 2)
    backbone = _one_layer_bert()
    peft.load_adapter(backbone, old)
    peft.add_adapter(backbone, "ner", "madx_task")
    assert peft.replace_adapter(backbone, "en", new) == "en"
    assert peft.active_adapters(backbone) == ["en", "ner"]
    fresh = _one_layer_bert()
    peft.load_adapter(fresh, new)
    for key, value in peft.adapter_variables(fresh, "en").items():
        np.testing.assert_array_equal(np.array(peft.adapter_variables(backbone, "en")[key]),
                                      np.array(value))


def test_an_adapter_that_sits_elsewhere_is_refused_and_nothing_changes(tmp_path):
    houlsby = _language_file(tmp_path, "de", 2, config="houlsby")
    backbone = _one_layer_bert()
    peft.load_adapter(backbone, _language_file(tmp_path, "en", 1))
    before = [np.array(w) for w in backbone.weights]
    with pytest.raises(ValueError, match="placement='houlsby', and 'en' has "
                                         "placement='pfeiffer'"):
        peft.replace_adapter(backbone, "en", houlsby)
    with pytest.raises(ValueError, match="No adapter named 'fr' to replace"):
        peft.replace_adapter(backbone, "fr", houlsby)
    assert peft.adapter_names(backbone) == ["en"]
    for value, weight in zip(before, backbone.weights):
        np.testing.assert_array_equal(value, np.array(weight))
