import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.export import export_saved_model
from keras_ctx.tasks import SequenceClassifier, SpanQuestionAnswerer, TokenClassifier
from keras_ctx.tasks.heads import Pool
from tests.tiny import tiny_encoder


def synthetic(n=256, length=8, seed=0):
    """Label 1 iff token 5 ('bank') occurs: learnable only by reading the tokens."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 10, size=(n, length)).astype("int32")
    lengths = rng.integers(3, length + 1, size=n)
    padding = (np.arange(length)[None] < lengths[:, None]).astype("int32")
    ids = ids * padding
    ids[:, 0] = 2
    labels = ((ids == 5).any(axis=1)).astype("int32")
    return {"token_ids": ids, "padding_mask": padding}, labels


def test_pooling_matches_numpy():
    sequence = np.random.default_rng(0).normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], "int32")
    np.testing.assert_allclose(Pool("first")(sequence, mask), sequence[:, 0])
    np.testing.assert_allclose(Pool("last")(sequence, mask), sequence[[0, 1], [1, 3]])
    np.testing.assert_allclose(Pool("mean")(sequence, mask)[0], sequence[0, :2].mean(0),
                               atol=1e-6)


def test_classifier_learns_and_round_trips_through_keras_file(tmp_path):
    x, y = synthetic()
    model = SequenceClassifier(tiny_encoder(), num_classes=2, dropout=0.0)
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=True)
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0)
    assert history.history["accuracy"][-1] > 0.9, history.history
    path = tmp_path / "classifier.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)


def test_token_classifier_and_qa_shapes_and_padding():
    x, _ = synthetic(4)
    tagger = TokenClassifier(tiny_encoder(), num_labels=5)
    assert tagger(x).shape == (4, 8, 5)
    qa = SpanQuestionAnswerer(tiny_encoder())
    logits = keras.ops.convert_to_numpy(qa(x))
    assert logits.shape == (4, 8, 2)
    assert np.all(logits[x["padding_mask"] == 0] < -1e8)
    assert np.all(logits[x["padding_mask"] == 1] > -1e8)


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export")
def test_exported_classifier_serves_logits_and_probabilities(tmp_path):
    x, _ = synthetic(3)
    model = SequenceClassifier(tiny_encoder(), num_classes=3)
    path = export_saved_model(model, tmp_path / "clf", sequence_length=8)
    served = tf.saved_model.load(path).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in x.items()})
    np.testing.assert_allclose(served["logits"], keras.ops.convert_to_numpy(model(x)), atol=1e-5)
    np.testing.assert_allclose(served["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)


def test_bad_task_arguments_fail_clearly():
    with pytest.raises(ValueError, match="pooling"):
        SequenceClassifier(tiny_encoder(), 2, pooling="max")
    with pytest.raises(ValueError, match="num_classes"):
        SequenceClassifier(tiny_encoder(), 0)
