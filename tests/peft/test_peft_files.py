"""LoRA and adapter files record the model they were made for, and another is refused in
one line with the model unchanged (issue 53)."""

import json

import keras
import numpy as np
import pytest

from keras_ctx import peft
from keras_ctx.models import from_preset

SMALL = dict(vocabulary_size=50, max_sequence_length=16, hidden_size=32, num_heads=2,
             intermediate_size=64, num_layers=2)


def _preset_backbone(preset="bert-tiny", seed=0, **changes):
    keras.utils.set_random_seed(seed)
    return from_preset(preset, **dict(SMALL, **changes))


def state(model):
    """What a refused load must leave as it was: LoRA, adapters, trainable count, weights."""
    return {
        "lora": sorted(layer.path for layer in model._flatten_layers()
                       if getattr(layer, "lora_enabled", False)),
        "adapters": peft.adapter_names(model),
        "trainable": sum(int(np.prod(v.shape)) for v in model.trainable_weights),
        "weights": [(v.path, keras.ops.convert_to_numpy(v).tobytes()) for v in model.weights],
    }


def _one_line(error):
    message = str(error.value)
    assert "\n" not in message
    return message


def _lora_file(tmp_path, model=None):
    model = model or _preset_backbone()
    peft.enable_lora(model, rank=2, patterns=["*self_attention/query"])
    path = tmp_path / "lora.safetensors"
    peft.save_lora(model, path)
    return path


def test_a_lora_file_is_refused_by_a_deeper_backbone_naming_the_field(tmp_path):
    """Every layer the file names exists in a deeper model with the same shapes: it loaded
    into the first two of four blocks without a word."""
    path = _lora_file(tmp_path)
    deeper = _preset_backbone(num_layers=4)
    before = state(deeper)
    with pytest.raises(ValueError) as error:
        peft.load_lora(deeper, path)
    message = _one_line(error)
    assert "num_layers=2" in message and "num_layers=4" in message and str(path) in message
    assert state(deeper) == before
    peft.load_lora(_preset_backbone(seed=1), path)  # the backbone it was made for takes it


def test_a_lora_file_is_refused_by_a_backbone_of_another_computation(tmp_path):
    """Same layer paths and shapes, another activation: the factors were trained for a
    different function."""
    path = _lora_file(tmp_path)
    other = _preset_backbone(activation="relu")
    before = state(other)
    with pytest.raises(ValueError, match="activation='gelu'.*activation='relu'"):
        peft.load_lora(other, path)
    assert state(other) == before


def _adapter_file(tmp_path, model=None):
    model = model or _preset_backbone()
    peft.add_adapter(model, "task", "pfeiffer")
    path = tmp_path / "task.safetensors"
    peft.save_adapter(model, "task", path)
    return path


def test_an_adapter_file_is_refused_by_another_family_of_the_same_sizes(tmp_path):
    """An adapter's tensors are named by block index: a BERT adapter loaded into a RoBERTa
    (or ELECTRA) backbone of the same sizes without a word."""
    path = _adapter_file(tmp_path)
    for preset in ("roberta-base", "electra-small"):
        other = _preset_backbone(preset, **({"embedding_size": 32} if preset.startswith("electra")
                                            else {}))
        before = state(other)
        with pytest.raises(ValueError) as error:
            peft.load_adapter(other, path)
        message = _one_line(error)
        assert "made for a BertBackbone" in message and type(other).__name__ in message
        assert state(other) == before
    assert peft.load_adapter(_preset_backbone(seed=2), path) == "task"


def test_a_refused_adapter_leaves_no_slot_or_switch_behind(tmp_path):
    """The adapter is checked before it is inserted (it was inserted, then deleted: the
    blocks kept an empty slot)."""
    path = _adapter_file(tmp_path)
    deeper = _preset_backbone(num_layers=3)
    before = state(deeper)
    with pytest.raises(ValueError, match="does not fit"):
        peft.load_adapter(deeper, path)
    assert state(deeper) == before
    blocks = peft.transformer_blocks(deeper)
    assert all(getattr(block, "feedforward_adapters", None) is None for block in blocks)


def _without_record(path):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="numpy") as handle:
        metadata = dict(handle.metadata())
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    del metadata["made_for"]
    old = path.with_name("old-" + path.name)
    save_file(tensors, str(old), metadata=metadata)
    return old


def test_files_without_the_record_are_refused_unless_asked_for(tmp_path):
    """The rule for files written before they recorded their model: refused in one line
    saying how to load them anyway (checked by names and shapes only)."""
    lora = _without_record(_lora_file(tmp_path))
    model = _preset_backbone(seed=3)
    before = state(model)
    with pytest.raises(ValueError, match="does not record the model it was made for.*"
                                         "allow_unrecorded=True"):
        peft.load_lora(model, lora)
    assert state(model) == before
    peft.load_lora(model, lora, allow_unrecorded=True)
    assert state(model)["lora"] != before["lora"]

    adapter = _without_record(_adapter_file(tmp_path))
    with pytest.raises(ValueError, match="allow_unrecorded=True to load_adapter"):
        peft.load_adapter(model, adapter)
    assert peft.load_adapter(model, adapter, allow_unrecorded=True) == "task"


def test_the_files_record_backbone_family_and_architecture(tmp_path):
    from safetensors import safe_open

    model = _preset_backbone()
    path = _lora_file(tmp_path, model)
    with safe_open(str(path), framework="numpy") as handle:
        record = json.loads(handle.metadata()["made_for"])
        layers = json.loads(handle.metadata()["layers"])
    assert record["backbone"] == "BertBackbone" and record["family"] == "bert"
    assert {key: record["config"][key] for key in SMALL} == SMALL
    assert all(key not in record["config"] for key in ("name", "dtype", "dropout"))
    assert sorted(layers) == sorted(peft.lora_variables(model)[k].path.rsplit("/", 1)[0]
                                    for k in peft.lora_variables(model)
                                    if k.endswith("lora_kernel_a"))


@pytest.mark.parametrize("arguments, message", [
    (dict(rank=0), "`rank` must be a positive integer, got 0"),
    (dict(rank=2.0), "`rank` must be a positive integer"),
    (dict(rank=2, alpha=float("nan")), "`alpha` must be a positive finite number"),
    (dict(rank=2, alpha=-1.0), "`alpha` must be a positive finite number"),
])
def test_enable_lora_refuses_ranks_and_alphas_that_make_no_sense(arguments, message):
    model = _preset_backbone()
    before = state(model)
    with pytest.raises(ValueError, match=message):
        peft.enable_lora(model, patterns=["*self_attention/query"], **arguments)
    assert state(model) == before


@pytest.mark.parametrize("block", [0, 1])  # whichever the walk meets first
def test_enable_lora_changes_nothing_when_one_chosen_layer_already_has_it(block):
    model = _preset_backbone()
    peft.enable_lora(model, rank=2, patterns=[f"*block_{block}/self_attention/query"])
    before = state(model)
    with pytest.raises(ValueError, match="already enabled"):
        peft.enable_lora(model, rank=2, patterns=["*self_attention/query"])
    assert state(model) == before


@pytest.mark.parametrize("overrides, message", [
    (dict(invertible_reduction_factor=0), "`invertible_reduction_factor` must be a positive"),
    (dict(invertible="yes"), "`invertible` must be True or False"),
    (dict(activation="relux"), "`activation` must be the name of a Keras activation"),
])
def test_adapter_configs_that_make_no_sense_are_refused(overrides, message):
    model = _preset_backbone()
    before = state(model)
    with pytest.raises(ValueError, match=message):
        peft.add_adapter(model, "x", "madx_language", **overrides)
    assert state(model) == before
