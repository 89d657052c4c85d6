"""model.quantize(mode) on every backbone kind, in Keras 3.15's modes, saved and reloaded."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import peft
from keras_ctx.layers.embeddings import TokenEmbedding
from tests.tasks.text_fixtures import backbone

IDS = np.array([[2, 5, 7, 9, 3, 0], [4, 8, 6, 0, 0, 0]], "int32")

# Bounds on ||quantized - float|| / ||float|| of the last layer's output. Per weight,
# abs-max rounding errs by at most half a step: max|w| / 254 in int8 (0.4%), max|w| / 14
# in int4 (7%); float8 e4m3 keeps 3 mantissa bits, a relative step of 2^-4 (6%). Errors
# of independent weights partly cancel in each sum, so the output errs less than the
# worst weight; measured on these tiny models: int8 ~0.3%, float8 ~1-2%, int4 ~5-7%.
TOLERANCE = {"int8": 0.02, "float8": 0.1, "int4": 0.25}


def _inputs_and_output(model):
    mask = (IDS > 0).astype("int32")
    if "encoder_token_ids" in model.input:
        return {"encoder_token_ids": IDS, "encoder_padding_mask": mask,
                "decoder_token_ids": IDS, "decoder_padding_mask": mask}, "decoder_sequence_output"
    x = {"token_ids": IDS, "padding_mask": mask}
    if "segment_ids" in model.input:
        x["segment_ids"] = np.zeros_like(IDS)
    return x, "sequence_output"


@pytest.fixture(autouse=True)
def _frozen_heap():
    """Keras' quantize deletes each float kernel and runs gc.collect() per deletion (to free
    device buffers): over the whole heap of a test process (TensorFlow, JAX) that was a third
    of this module's time. Objects older than the test are left out of those collections
    (gc.freeze); the test's own are still collected."""
    import gc

    gc.freeze()
    yield
    gc.unfreeze()


def _quantized(model, mode):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.quantize(mode)
    return [str(w.message) for w in caught]


# By default bert float8 and gpt2 int4 (int8 is also reloaded by default on JAX and torch in
# tests/peft/test_backends_tasks.py); the other pairs and T5 with -m slow (20-70 s each).
DEFAULT_PAIRS = {("bert", "float8"), ("gpt2", "int4")}


@pytest.mark.parametrize("family, mode", [
    pytest.param(family, mode, marks=() if (family, mode) in DEFAULT_PAIRS else pytest.mark.slow)
    for family in ("bert", "gpt2", "t5") for mode in ("int8", "int4", "float8")])
def test_quantized_backbone_reloads_identically_and_stays_close_to_float32(
        family, mode, tmp_path):
    model = backbone(family)
    x, name = _inputs_and_output(model)
    reference = keras.ops.convert_to_numpy(model(x)[name])
    said = _quantized(model, mode)
    tables = [layer for layer in model._flatten_layers() if isinstance(layer, TokenEmbedding)]
    dense = [layer for layer in model._flatten_layers()
             if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))]
    assert dense and all(layer.quantization_mode == mode for layer in dense)
    if mode == "float8":  # as keras.layers.Embedding: no float8 table, said so
        assert all(t.quantization_mode is None for t in tables)
        assert any("TokenEmbedding" in s and "'float8'" in s for s in said)
    else:
        assert tables and all(t.quantization_mode == mode for t in tables)
        assert all(t.embeddings.dtype == "int8" for t in tables)
    quantized = keras.ops.convert_to_numpy(model(x)[name])
    error = np.linalg.norm(quantized - reference) / np.linalg.norm(reference)
    assert 0 < error < TOLERANCE[mode], error
    path = str(tmp_path / "q.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(reloaded(x)[name]), quantized)
    # A reloaded quantized model saves again (a quantized run read back by any command:
    # its layers held the whole DTypePolicyMap and "Invalid dtype: object" was raised).
    assert all(layer.dtype_policy.quantization_mode == mode
               for layer in reloaded._flatten_layers()
               if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)))
    again = str(tmp_path / "again.keras")
    reloaded.save(again)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(keras.saving.load_model(again)(x)[name]), quantized)


def test_int4_table_packs_two_values_per_byte_and_matches_its_numpy_reference():
    layer = TokenEmbedding(5, 7)
    layer.build()
    table = keras.ops.convert_to_numpy(layer.embeddings)
    layer.quantize("int4")
    assert layer.embeddings.shape == (5, 4)
    # numpy: per-row abs-max scale 7 / max|row|, values rounded into [-8, 7].
    scale = 7.0 / np.abs(table).max(axis=-1, keepdims=True)
    want = np.clip(np.round(table * scale), -8, 7) / scale
    ids = np.array([[0, 4, 2]])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(ids)), want[ids], rtol=1e-5, atol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(1, 7)).astype("float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.reverse(hidden)), hidden @ want.T,
                               rtol=0.05, atol=0.05)  # hidden quantized to int8 per row
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int8")
    fresh = TokenEmbedding(5, 7)
    fresh.build()
    with pytest.raises(NotImplementedError, match="not 'float8'"):
        fresh.quantize("float8")


@pytest.mark.slow  # ~40 s
def test_lora_on_an_int8_backbone_trains_and_reloads(tmp_path):
    model = backbone("gpt2")
    model.quantize("int8")
    peft.enable_lora(model, rank=2, patterns=["*query", "*value"])
    peft.train_only(model, lora=True)
    x, name = _inputs_and_output(model)
    before = keras.ops.convert_to_numpy(model(x)[name])
    frozen = [keras.ops.convert_to_numpy(v) for v in model.non_trainable_weights]
    optimizer = keras.optimizers.Adam(1e-2)
    trainable = model.trainable_weights
    assert trainable and all("lora" in v.path for v in trainable)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)[name] - 1.0))
        optimizer.apply(tape.gradient(loss, trainable), trainable)
    after = keras.ops.convert_to_numpy(model(x)[name])
    assert np.abs(after - before).max() > 1e-4  # the LoRA factors learned
    for old, new in zip(frozen, model.non_trainable_weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(new), old)  # int8 weights untouched
    peft.save_lora(model, str(tmp_path / "lora.safetensors"))
    fresh = backbone("gpt2")
    fresh.quantize("int8")
    peft.load_lora(fresh, str(tmp_path / "lora.safetensors"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(fresh(x)[name]), after, atol=1e-6)
    # A whole .keras file: Keras merges the factors into the int8 kernels (requantized).
    model.save(str(tmp_path / "merged.keras"))
    merged = keras.ops.convert_to_numpy(keras.saving.load_model(str(tmp_path / "merged.keras"))(x)[name])
    assert np.linalg.norm(merged - after) / np.linalg.norm(after) < TOLERANCE["int8"]
    assert np.linalg.norm(merged - after) < np.linalg.norm(before - after)
