import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.models.gpt.backbone import GPTBackbone
from keras_ctx.data.task_inputs import gpt_finetuning_inputs
from keras_ctx.pretraining.causal_lm import CausalLMPretrainer, masked_token_loss
from keras_ctx.tasks import GPTFineTuner
from tests.backends import slow_on
from tests.pretraining.callbacks import FirstBatchLoss

VOCAB, LENGTH = 24, 16


def tiny_gpt(normalize_first=True):
    return GPTBackbone(vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_size=32,
                       intermediate_size=64, max_sequence_length=LENGTH, dropout=0.0,
                       normalize_first=normalize_first)


def counting_language(n, rng):
    """t_{i+1} = t_i + step (mod 20), step in {1, 2}: every next token is predictable
    from the two before it."""
    start = rng.integers(0, 20, size=(n, 1))
    step = rng.integers(1, 3, size=(n, 1))
    return ((start + step * np.arange(LENGTH)[None]) % 20).astype("int32")


def test_masked_token_loss_matches_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = rng.integers(0, 5, size=(2, 3))
    weights = np.array([[1, 1, 0], [1, 0, 0]], "float32")
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    expected = -(picked * weights).sum() / weights.sum()
    got = float(masked_token_loss(logits, labels, weights))
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@slow_on("jax", "torch")  # torch: eager, minutes. Both: one step in test_matrix.py, equal to
# TensorFlow's (test_backends.py), and learning in test_jax_training.py
def test_tiny_gpt2_learns_counting_language_under_xla_and_generates_it():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    ids = counting_language(512, rng)
    ds = tf.data.Dataset.from_tensor_slices(
        {"token_ids": ids, "padding_mask": np.ones_like(ids)})
    ds = ds.batch(32, drop_remainder=True).cache()
    model = CausalLMPretrainer(tiny_gpt())
    model.compile(optimizer=keras.optimizers.Adam(5e-3), jit_compile=True)
    first = FirstBatchLoss()
    history = model.fit(ds, epochs=8, verbose=0, callbacks=[first])
    assert first.loss > 2.5  # ~ log(24) at initialisation
    assert history.history["loss"][-1] < 0.2 * first.loss
    assert history.history["accuracy"][-1] > 0.85

    # Greedy continuation of unseen prompts follows the language's rule.
    prompt = np.array([[3, 4, 5, 6], [10, 12, 14, 16]])
    out = keras.ops.convert_to_numpy(model.generate(prompt, max_length=LENGTH)["token_ids"])
    expected = (prompt[:, :1] + (prompt[:, 1:2] - prompt[:, :1]) * np.arange(LENGTH)) % 20
    assert (out[:, :4] == prompt).all()
    assert (out == expected).mean() > 0.9


def test_gpt_finetuning_inputs_join_segments_with_delimiters():
    out = gpt_finetuning_inputs([tf.constant([5, 6]), tf.constant([7])], 8,
                                start_id=1, delimiter_id=2, extract_id=3)
    np.testing.assert_array_equal(out["token_ids"], [1, 5, 6, 2, 7, 3, 0, 0])
    np.testing.assert_array_equal(out["padding_mask"], [1, 1, 1, 1, 1, 1, 0, 0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceed sequence_length"):
        gpt_finetuning_inputs([tf.range(10)], 8, 1, 2, 3)


@slow_on("jax", "torch")  # torch: eager, minutes. Both: one step in test_matrix.py, equal to
# TensorFlow's (test_backends.py), and learning in test_jax_training.py
def test_gpt_finetuner_combines_classification_and_lm_losses():
    """Label: whether the second segment counts in the upper half (tokens 10..19)."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = 256
    labels = rng.integers(0, 2, size=n)
    first = [(s + np.arange(4)) % 20 for s in rng.integers(0, 20, size=n)]
    second = [10 * y + (s + np.arange(4)) % 10 for s, y in zip(rng.integers(0, 10, size=n), labels)]

    def gen():
        for a, b, y in zip(first, second, labels):
            yield a.astype("int32"), b.astype("int32"), y

    ds = tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec([4], tf.int32), tf.TensorSpec([4], tf.int32), tf.TensorSpec([], tf.int64)))
    ds = ds.map(lambda a, b, y: (gpt_finetuning_inputs([a, b], LENGTH, 20, 21, 22), y))
    ds = ds.cache().batch(32, drop_remainder=True)
    model = GPTFineTuner(tiny_gpt(), num_classes=2, lm_weight=0.5, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(5e-3), jit_compile=True)
    history = model.fit(ds, epochs=8, verbose=0).history
    for i in (0, -1):  # the epoch means obey L = L_cls + 0.5 L_LM
        np.testing.assert_allclose(
            history["loss"][i],
            history["classification_loss"][i] + 0.5 * history["lm_loss"][i], rtol=1e-4)
    assert history["lm_loss"][-1] < 0.7 * history["lm_loss"][0]
    assert history["accuracy"][-1] > 0.85
    assert model.predict(next(iter(ds))[0], verbose=0).shape == (32, 2)
    with pytest.raises(ValueError, match="num_classes"):
        GPTFineTuner(tiny_gpt(), num_classes=1)


def test_pretrainer_saves_and_loads_with_its_backbone(tmp_path):
    model = CausalLMPretrainer(tiny_gpt())
    x = {"token_ids": np.arange(32).reshape(2, 16) % VOCAB,
         "padding_mask": np.ones((2, 16), "int32")}
    path = str(tmp_path / "lm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.backbone, GPTBackbone)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)),
                               keras.ops.convert_to_numpy(model(x)), atol=1e-6)

