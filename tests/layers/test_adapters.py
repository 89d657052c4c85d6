"""Adapters (Houlsby, MAD-X, invertible) and LoRA: math, insertion, freezing, files."""

import numpy as np
import pytest
import keras

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.common.errors import ConfigError
from keras_ctx import peft as adapters
from keras_ctx.layers.adapters import BottleneckAdapter, InvertibleAdapter, adapter_config
from keras_ctx.models import from_preset
from keras_ctx.testing import run_layer_test
from tests.models.inputs import one_segment

SMALL = dict(vocabulary_size=50, max_sequence_length=16, hidden_size=32, num_heads=2,
             intermediate_size=64, num_layers=2)


def _tiny_bert(seed=0):
    keras.utils.set_random_seed(seed)
    return from_preset("bert-tiny", **SMALL)


def _randomize_adapter(model, name, scale=0.3, seed=1):
    rng = np.random.default_rng(seed)
    for variable in adapters.adapter_variables(model, name).values():
        variable.assign(rng.normal(0, scale, variable.shape).astype("float32"))


def test_bottleneck_adapter_layer_and_parameter_count():
    run_layer_test(BottleneckAdapter, {"reduction_factor": 4},
                   np.random.rand(2, 3, 16).astype("float32"), expected_output_shape=(2, 3, 16))
    adapter = BottleneckAdapter(reduction_factor=16)
    adapter.build((None, None, 768))
    # Houlsby et al. 2019, Sec. 2.1: 2md + d + m parameters, m = d / 16 = 48.
    assert adapter.count_params() == 2 * 768 * 48 + 768 + 48


def test_invertible_adapter_inverse_is_exact():
    layer = InvertibleAdapter(reduction_factor=2)
    x = np.random.default_rng(0).normal(size=(2, 5, 9)).astype("float32")
    layer.build(x.shape)
    for variable in layer.weights:
        variable.assign(np.random.default_rng(3).normal(0, 0.5, variable.shape))
    y = to_numpy(layer(x))
    assert np.abs(y - x).max() > 0.1  # it does something
    back = to_numpy(layer(y, inverse=True))
    np.testing.assert_allclose(back, x, atol=1e-5)
    # NICE coupling by hand: o1 = e1 + F(e2), o2 = e2 + G(o1).
    def mlp(down, up, v):
        return np.maximum(v @ to_numpy(down.kernel) + to_numpy(down.bias), 0) @ to_numpy(up.kernel) \
            + to_numpy(up.bias)
    o1 = x[..., :4] + mlp(layer.f_down, layer.f_up, x[..., 4:])
    o2 = x[..., 4:] + mlp(layer.g_down, layer.g_up, o1)
    np.testing.assert_allclose(y, np.concatenate([o1, o2], -1), atol=1e-5)


def test_config_rejects_unknown_keys_and_names():
    # A misspelt key or name is refused naming the one meant (issue 55: typos raise).
    with pytest.raises(ConfigError) as caught:
        adapter_config("pfeiffer", reduction_facter=8)
    assert str(caught.value) == (
        "Unknown key 'reduction_facter' for adapter config 'pfeiffer' (did you mean "
        "'reduction_factor'?); valid: activation, invertible, invertible_reduction_factor, "
        "placement, places, reduction_factor.")
    with pytest.raises(ConfigError) as caught:
        adapter_config("pfeifer")
    assert str(caught.value) == (
        "`config` must be one of 'houlsby', 'madx_language', 'madx_task', 'pfeiffer', got "
        "'pfeifer' (did you mean 'pfeiffer'?).")
    with pytest.raises(ConfigError) as caught:
        adapter_config("pfeiffer", activation="rleu")
    assert str(caught.value) == ("`activation` must be the name of a Keras activation (e.g. "
                                 "'relu'), got 'rleu' (did you mean 'relu'?).")
    with pytest.raises(ConfigError) as caught:
        adapter_config("pfeiffer", places="feedforward")  # a string is not a list of places
    assert str(caught.value) == ("`places` must be a non-empty list of 'attention', "
                                 "'cross_attention', 'feedforward', got 'feedforward'.")
    # MAD-X: reduction factor 16 for task adapters, 2 (+ invertible) for language adapters.
    assert adapter_config("madx_task")["reduction_factor"] == 16
    assert adapter_config("madx_language")["reduction_factor"] == 2
    assert adapter_config("madx_language")["invertible"]


def test_pfeiffer_stack_matches_madx_equations():
    """One post-LN block by hand: r = x + FFN, out = LN(r + T(r + L(LN(r))))."""
    from keras_ctx.layers import TransformerEncoderBlock

    block = TransformerEncoderBlock(num_heads=2, intermediate_size=32, dropout=0.0)
    x = np.random.default_rng(0).normal(size=(2, 4, 16)).astype("float32")
    block(x)
    model = keras.Sequential([keras.Input((4, 16)), block])
    adapters.add_adapter(model, "lang", "madx_language", invertible=False)
    adapters.add_adapter(model, "task", "madx_task", reduction_factor=4)
    _randomize_adapter(model, "lang")
    _randomize_adapter(model, "task", seed=2)
    got = to_numpy(block(x))
    x = keras.ops.convert_to_tensor(x)  # the sums below add tensors (torch's to NumPy's fails)
    a = block.self_attention_norm(x + block.self_attention(x))
    r = a + block.feedforward(a)
    h = block.feedforward_norm(r)
    lang = block.feedforward_adapters.get("lang")
    task = block.feedforward_adapters.get("task")
    z = r + lang(h)
    z = r + task(z)
    np.testing.assert_allclose(got, to_numpy(block.feedforward_norm(z)),
                               atol=1e-5)


def test_houlsby_matches_paper_placement():
    """Both sublayers: out = LN(x + y + A(y)) (Houlsby et al. 2019, Fig. 2)."""
    from keras_ctx.layers import TransformerEncoderBlock

    block = TransformerEncoderBlock(num_heads=2, intermediate_size=32, dropout=0.0)
    x = np.random.default_rng(0).normal(size=(2, 4, 16)).astype("float32")
    block(x)
    model = keras.Sequential([keras.Input((4, 16)), block])
    adapters.add_adapter(model, "h", "houlsby", reduction_factor=4)
    _randomize_adapter(model, "h")
    got = to_numpy(block(x))
    x = keras.ops.convert_to_tensor(x)  # the sums below add tensors (torch's to NumPy's fails)
    y = block.self_attention(x)
    a = block.self_attention_norm(x + y + block.attention_adapters.get("h")(y))
    y = block.feedforward(a)
    out = block.feedforward_norm(a + y + block.feedforward_adapters.get("h")(y))
    np.testing.assert_allclose(got, to_numpy(out), atol=1e-5)


@pytest.mark.parametrize("preset,config", [
    ("bert-tiny", "madx_language"), ("bert-tiny", "houlsby"), ("gpt2", "pfeiffer"),
    ("t5-small", "houlsby"), ("bart-base", "pfeiffer"), ("xlnet-base", "houlsby")])
def test_zero_adapters_leave_every_backbone_unchanged(preset, config):
    keras.utils.set_random_seed(0)
    small = dict(vocabulary_size=50, num_layers=1, num_heads=2, hidden_size=16,
                 intermediate_size=32)
    if preset in ("bert-tiny", "xlnet-base"):
        extra = {"max_sequence_length": 16} if preset == "bert-tiny" else {}
        model = from_preset(preset, **small, **extra)
        inputs = one_segment(length=6)
    elif preset == "gpt2":
        model = from_preset(preset, **small, max_sequence_length=16)
        inputs = {"token_ids": one_segment(length=6)["token_ids"],
                  "padding_mask": np.ones((2, 6), "int32")}
    else:
        model = from_preset(preset, **_encoder_decoder_config(preset))
        ids = one_segment(length=6)["token_ids"]
        inputs = {"encoder_token_ids": ids, "encoder_padding_mask": np.ones_like(ids),
                  "decoder_token_ids": ids, "decoder_padding_mask": np.ones_like(ids)}
    key = "sequence_output" if "token_ids" in inputs else "decoder_sequence_output"
    before = to_numpy(model(inputs)[key])
    weights_before = len(model.weights)
    adapters.add_adapter(model, "a", config)
    assert len(model.weights) > weights_before
    changed = to_numpy(model(inputs)[key])
    assert not np.array_equal(changed, before)  # adapters are in the forward pass
    for name, variable in adapters.adapter_variables(model, "a").items():
        if ".up." in name or "_up." in name:
            variable.assign(np.zeros(variable.shape))
    np.testing.assert_array_equal(to_numpy(model(inputs)[key]), before)
    adapters.set_active_adapters(model, [])
    _randomize_adapter(model, "a")
    np.testing.assert_array_equal(to_numpy(model(inputs)[key]), before)


def _encoder_decoder_config(preset):
    config = dict(vocabulary_size=50, num_layers=1, num_heads=2, hidden_size=16,
                  intermediate_size=32)
    if preset != "t5-small":
        config["max_sequence_length"] = 16
    from keras_ctx.models.presets import preset_config

    _, known = preset_config(preset)
    return {k: v for k, v in config.items() if k in known}


def _classifier(backbone):
    from keras_ctx.tasks.heads import SequenceClassifier

    return SequenceClassifier(backbone, num_classes=2, dropout=0.0)


def _fit(model, steps=3):
    x = one_segment(length=8, batch=8)
    y = np.arange(8) % 2
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=4, epochs=steps, verbose=0)


def test_train_only_adapters_keeps_frozen_weights_bit_identical():
    backbone = _tiny_bert()
    adapters.add_adapter(backbone, "lang", "madx_language")
    adapters.add_adapter(backbone, "task", "madx_task")
    classifier = _classifier(backbone)
    head = classifier.get_layer("logits")
    count = adapters.train_only(classifier, adapters=["task"], keep=[head])
    # MAD-X task adapter: per layer 2 h (h/16) + h/16 + h, h = 32; plus the 32x2+2 head.
    assert count == 2 * (2 * 32 * 2 + 2 + 32) + 32 * 2 + 2
    frozen = {v.path + str(i): to_numpy(v).copy() for i, v in enumerate(classifier.weights)
              if not v.trainable}
    task = {k: to_numpy(v).copy() for k, v in adapters.adapter_variables(backbone, "task").items()}
    _fit(classifier)
    after = {v.path + str(i): to_numpy(v) for i, v in enumerate(classifier.weights)
             if not v.trainable}
    for key, value in frozen.items():
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    moved = [k for k, v in adapters.adapter_variables(backbone, "task").items()
             if not np.array_equal(to_numpy(v), task[k])]
    assert moved  # the task adapter did train


def test_lora_on_chosen_projections_trains_only_factors(tmp_path):
    backbone = _tiny_bert()
    enabled = adapters.enable_lora(backbone, rank=2, patterns=["*self_attention/query",
                                                               "*feedforward/intermediate"])
    assert sorted(p.split("/")[-1] for p in enabled) == ["intermediate"] * 2 + ["query"] * 2
    with pytest.raises(ValueError, match="No Dense/EinsumDense layer path matches"):
        adapters.enable_lora(backbone, 2, ["*no_such_layer*"])
    classifier = _classifier(backbone)
    adapters.train_only(classifier, lora=True)
    frozen = [(v, to_numpy(v).copy()) for v in classifier.weights if not v.trainable]
    # Keras' EinsumDense LoRA: A (32, 2 heads, r), B (r, 16); Dense: A (32, r), B (r, 64).
    assert sum(int(np.prod(v.shape)) for v in classifier.trainable_weights) == \
        2 * ((32 * 2 * 2 + 2 * 16) + (32 * 2 + 2 * 64))
    _fit(classifier)
    for variable, value in frozen:
        np.testing.assert_array_equal(to_numpy(variable), value, err_msg=variable.path)
    path = tmp_path / "lora.safetensors"
    adapters.save_lora(backbone, path)
    with pytest.raises(FileExistsError):
        adapters.save_lora(backbone, path)
    # A fresh backbone with the same base weights + the LoRA file = the trained one.
    fresh = _tiny_bert()
    adapters.load_lora(fresh, path)
    x = one_segment(length=8, seed=4)
    np.testing.assert_allclose(to_numpy(fresh(x)["sequence_output"]),
                               to_numpy(backbone(x)["sequence_output"]),
                               atol=1e-5)


def test_save_load_swap_adapters_alone(tmp_path):
    backbone = _tiny_bert()
    adapters.add_adapter(backbone, "de", "madx_language")
    _randomize_adapter(backbone, "de")
    x = one_segment(length=8, seed=5)
    with_de = to_numpy(backbone(x)["sequence_output"])
    path = tmp_path / "de.safetensors"
    adapters.save_adapter(backbone, "de", path)
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        keys = list(handle.keys())
    # Only adapter tensors: 2 layers x 4 + the invertible adapter's 8.
    assert len(keys) == 2 * 4 + 8 and all("embedding" not in k for k in keys)
    fresh = _tiny_bert()
    plain = to_numpy(fresh(x)["sequence_output"])
    assert adapters.load_adapter(fresh, path) == "de"
    np.testing.assert_allclose(to_numpy(fresh(x)["sequence_output"]),
                               with_de, atol=1e-6)
    adapters.set_active_adapters(fresh, [])
    np.testing.assert_array_equal(to_numpy(fresh(x)["sequence_output"]),
                                  plain)
    with pytest.raises(ValueError, match="already has an adapter 'de'"):
        adapters.load_adapter(fresh, path)
    adapters.load_adapter(fresh, path, name="de2", activate=False)
    with pytest.raises(ValueError, match="No adapters named"):
        adapters.set_active_adapters(fresh, ["fr"])
    other = from_preset("bert-tiny", **dict(SMALL, num_layers=1))
    with pytest.raises(ValueError, match="does not fit"):
        adapters.load_adapter(other, path)
    assert adapters.adapter_names(other) == []  # nothing half-loaded


def test_keras_file_round_trip_keeps_adapters(tmp_path):
    backbone = _tiny_bert()
    adapters.add_adapter(backbone, "lang", "madx_language")
    adapters.add_adapter(backbone, "task", "madx_task")
    adapters.add_adapter(backbone, "off", "pfeiffer", activate=False)
    _randomize_adapter(backbone, "lang")
    _randomize_adapter(backbone, "task", seed=2)
    x = one_segment(length=8, seed=6)
    want = to_numpy(backbone(x)["sequence_output"])
    backbone.save(tmp_path / "adapted.keras")
    loaded = keras.saving.load_model(tmp_path / "adapted.keras")
    assert adapters.adapter_names(loaded) == ["lang", "task", "off"]
    assert adapters.active_adapters(loaded) == ["lang", "task"]
    np.testing.assert_allclose(to_numpy(loaded(x)["sequence_output"]), want,
                               atol=1e-6)
    adapters.delete_adapter(loaded, "off")
    assert "off" not in loaded.get_config()["adapters"]["configs"]


def test_sparse_last_layer_masked_lm_matches_dense_with_invertible_adapters():
    backbone = _tiny_bert()
    adapters.add_adapter(backbone, "lang", "madx_language")
    _randomize_adapter(backbone, "lang")
    batch = dict(one_segment(length=8, seed=7),
                 mask_positions=np.array([[1, 3], [2, 5]], "int32"),
                 mask_ids=np.ones((2, 2), "int32"), mask_weights=np.ones((2, 2), "float32"))
    sparse = adapters.AdapterMaskedLMPretrainer(backbone)
    dense = adapters.AdapterMaskedLMPretrainer(backbone, sparse_last_layer=False)
    dense.mlm_head = sparse.mlm_head
    got = to_numpy(sparse(batch)["mlm"])
    np.testing.assert_allclose(got, to_numpy(dense(batch)["mlm"]), atol=1e-4)
    # By hand: transform, inverse invertible adapter, tied output + bias.
    head = sparse.mlm_head
    rows = keras.ops.take_along_axis(backbone(one_segment(length=8, seed=7))["sequence_output"],
                                     batch["mask_positions"][..., None], axis=1)
    hidden = head.layer_norm(head.dense(rows))
    inverse = backbone.get_layer("encoder").input_adapters.get("lang")(hidden, inverse=True)
    want = inverse @ keras.ops.transpose(backbone.token_embedding.embeddings) + head.output_bias
    np.testing.assert_allclose(got, to_numpy(want), atol=1e-4)
    plain = head(rows)  # without the inverse the logits differ
    assert not np.allclose(to_numpy(plain), got, atol=1e-3)


@pytest.mark.tensorflow_only("a tf.function reads the switch variable when it runs; jax.jit "
                              "would bake it in (Keras' stateless steps pass it instead)")
def test_swapping_adapters_reaches_compiled_functions():
    """A traced/compiled predict follows set_active_adapters (the switch is a variable)."""
    backbone = _tiny_bert()
    adapters.add_adapter(backbone, "a", "pfeiffer")
    adapters.add_adapter(backbone, "b", "pfeiffer", activate=False)
    _randomize_adapter(backbone, "a")
    _randomize_adapter(backbone, "b", seed=3)
    x = one_segment(length=8, seed=8)
    predict = tf_function(lambda inputs: backbone(inputs)["sequence_output"])
    with_a = to_numpy(predict(x))
    adapters.set_active_adapters(backbone, ["b"])
    with_b = to_numpy(predict(x))
    assert not np.allclose(with_a, with_b)
    np.testing.assert_allclose(with_b, to_numpy(backbone(x)["sequence_output"]),
                               atol=1e-5)
    adapters.set_active_adapters(backbone, [])
    plain = _tiny_bert()
    np.testing.assert_allclose(to_numpy(predict(x)),
                               to_numpy(plain(x)["sequence_output"]), atol=1e-5)
    with pytest.raises(ValueError, match="order they were added"):
        adapters.set_active_adapters(backbone, ["b", "a"])


def tf_function(function):
    import tensorflow as tf

    return tf.function(function, jit_compile=True)


def _mlm_step(pretrainer, seed=3):
    batch = dict(one_segment(length=8, seed=seed, batch=4),
                 mask_positions=np.array([[1, 3]] * 4, "int32"),
                 mask_ids=np.array([[5, 7]] * 4, "int32"),
                 mask_weights=np.ones((4, 2), "float32"))
    # Eagerly on every backend: one step; on JAX the four cases below compile each op once
    # between them (one jax.jit per case measured no faster: tests/execution.py).
    pretrainer.compile(keras.optimizers.Adam(1e-2), run_eagerly=True)
    pretrainer.train_on_batch(batch)


def _own(head, backbone):
    """The head's weights but the backbone's token table it reads."""
    return [v for v in head.weights if v is not backbone.token_embedding.embeddings]


def _values(variables):
    return [np.array(to_numpy(v)) for v in variables]


@pytest.mark.parametrize("pretrained, train_head", [(False, None), (True, None), (True, True),
                                                    (False, False)])
def test_madx_head_trains_when_fresh_and_stays_frozen_when_pretrained(pretrained, train_head):
    # Pfeiffer et al. 2020: the language adapter trains by MLM with the pretrained
    # model fixed, its MLM head included; a fresh head (nothing pretrained) trains.
    from keras_ctx.layers.heads import MaskedLMHead

    backbone = _tiny_bert()
    adapters.add_adapter(backbone, "lang", "madx_language")
    checkpoint_head = None
    if pretrained:  # as keras_ctx.convert.heads.masked_lm_from_huggingface returns it
        checkpoint_head = MaskedLMHead(token_embedding=backbone.token_embedding)
        checkpoint_head.build((None, None, 32))
        rng = np.random.default_rng(5)
        for variable in _own(checkpoint_head, backbone):
            variable.assign(rng.normal(0, 0.5, variable.shape).astype("float32"))
    pretrainer = adapters.AdapterMaskedLMPretrainer(backbone, mlm_head=checkpoint_head,
                                                    train_head=train_head)
    head = _own(pretrainer.mlm_head, backbone)
    assert len(head) == 5  # transform kernel, bias, LayerNorm gamma, beta; output bias
    if pretrained:
        for mine, theirs in zip(head, _own(checkpoint_head, backbone)):
            np.testing.assert_array_equal(to_numpy(mine), to_numpy(theirs))
    count = adapters.train_only(pretrainer, adapters=["lang"])
    trains = pretrained is False if train_head is None else train_head
    adapter = adapters.adapter_variables(backbone, "lang").values()
    head_size = 32 * 32 + 32 + 2 * 32 + 50
    assert count == sum(int(np.prod(v.shape)) for v in adapter) + trains * head_size
    backbone_before, head_before = _values(backbone.weights), _values(head)
    adapter_before = _values(adapter)
    _mlm_step(pretrainer)
    for variable, value in zip(backbone.weights, backbone_before):
        if all(variable is not v for v in adapter):  # the tied table included
            np.testing.assert_array_equal(to_numpy(variable), value, err_msg=variable.path)
    assert not any(np.array_equal(to_numpy(v), b) for v, b in zip(adapter, adapter_before))
    changed = [not np.array_equal(to_numpy(v), b) for v, b in zip(head, head_before)]
    assert changed == [trains] * 5


def test_madx_head_must_be_tied_to_the_backbone():
    from keras_ctx.layers.heads import MaskedLMHead

    backbone = _tiny_bert()
    other = MaskedLMHead(token_embedding=_tiny_bert(1).token_embedding)
    with pytest.raises(ValueError, match="not tied to this backbone"):
        adapters.AdapterMaskedLMPretrainer(backbone, mlm_head=other)


def test_a_refused_lora_file_leaves_the_model_as_it_was(tmp_path):
    """Every layer, rank, alpha and factor shape is checked before any layer changes (a
    file naming a layer the model lacks left LoRA enabled on the layers before it, and
    the trainable count changed); a rank or alpha other than the model's is refused."""
    backbone = _tiny_bert()
    adapters.enable_lora(backbone, rank=2, patterns=["*self_attention/query"])
    path = tmp_path / "lora.safetensors"
    adapters.save_lora(backbone, path)

    def state(model):
        return ([layer.path for layer in model._flatten_layers()
                 if getattr(layer, "lora_enabled", False)],
                sum(int(np.prod(v.shape)) for v in model.trainable_weights))

    shallow = from_preset("bert-tiny", **dict(SMALL, num_layers=1))  # lacks the 2nd block
    wider = from_preset("bert-tiny", **dict(SMALL, hidden_size=64, intermediate_size=128))
    for model, said in ((shallow, "which this model lacks"), (wider, "has shape")):
        before = state(model)
        with pytest.raises(ValueError, match=said):
            adapters.load_lora(model, path)
        assert state(model) == before
    other = _tiny_bert()
    adapters.enable_lora(other, rank=4, patterns=["*self_attention/query"])
    before = state(other)
    with pytest.raises(ValueError, match="holds rank 2, alpha 2 LoRA .* where the model has "
                                         "rank 4"):
        adapters.load_lora(other, path)
    assert state(other) == before
    adapters.load_lora(_tiny_bert(), path)  # the model it was made for takes it



@pytest.mark.parametrize("cls", [BottleneckAdapter, InvertibleAdapter])
def test_the_adapters_signatures_show_every_documented_argument_with_its_default(cls):
    """The API reference reads the signature: `activation` and `kernel_initializer` were
    hidden in **kwargs there and showed as required."""
    import inspect
    import re

    documented = re.findall(r"^        (\w+):", cls.__doc__.split("Call arguments:")[0], re.M)
    parameters = inspect.signature(cls.__init__).parameters
    assert documented and all(
        name in parameters and parameters[name].default is not inspect.Parameter.empty
        for name in documented), (documented, list(parameters))
