import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.training import Checkpointer, TrainingDiverged, fit_resumable


def model_and_data(poison_from=None):
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(1, keepdims=True)
    if poison_from is not None:
        y[poison_from * 8:] = np.nan  # batches from `poison_from` on are NaN
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    else:
        dataset = (tf.data.Dataset.from_tensor_slices((x, y))
                   .shuffle(64, seed=3).batch(8, drop_remainder=True).repeat())
    return model, dataset


def weights(model):
    return [keras.ops.convert_to_numpy(w) for w in model.weights + model.optimizer.variables]


def test_interrupted_run_resumes_to_the_same_weights_optimizer_and_data(tmp_path):
    straight, data = model_and_data()
    fit_resumable(straight, data, steps=7, out_dir=str(tmp_path / "a"), checkpoint_every=2,
                  verbose=0)
    first, data = model_and_data()
    fit_resumable(first, data, steps=4, out_dir=str(tmp_path / "b"), checkpoint_every=2,
                  verbose=0)  # "killed" after step 4
    resumed, data = model_and_data()
    result = fit_resumable(resumed, data, steps=7, out_dir=str(tmp_path / "b"),
                           checkpoint_every=2, verbose=0)
    assert result["step"] == 7
    assert int(keras.ops.convert_to_numpy(resumed.optimizer.iterations)) == 7
    for got, want in zip(weights(resumed), weights(straight)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert Checkpointer(str(tmp_path / "b" / "checkpoints")).steps() == [6, 7]


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    model, data = model_and_data(poison_from=5)
    with pytest.raises(TrainingDiverged, match="last good checkpoint \\(step 4\\)"):
        fit_resumable(model, data, steps=8, out_dir=str(tmp_path), checkpoint_every=2,
                      verbose=0)
    assert Checkpointer(str(tmp_path / "checkpoints")).steps() == [2, 4]


def test_corrupt_checkpoint_fails_clearly(tmp_path):
    model, data = model_and_data()
    fit_resumable(model, data, steps=2, out_dir=str(tmp_path), checkpoint_every=2, verbose=0)
    (tmp_path / "checkpoints" / "step-000000002" / "model.weights.h5").write_bytes(b"junk")
    model, data = model_and_data()
    with pytest.raises(ValueError, match="cannot be restored"):
        fit_resumable(model, data, steps=4, out_dir=str(tmp_path), checkpoint_every=2,
                      verbose=0)


def test_a_damaged_state_file_is_refused_naming_the_checkpoint(tmp_path):
    """`check` (what a resume asks first) and `restore` say which checkpoint cannot be
    restored; the backend record, read from the same file, does not raise its JSON error
    first."""
    model, data = model_and_data()
    fit_resumable(model, data, steps=2, out_dir=str(tmp_path), checkpoint_every=2, verbose=0)
    (tmp_path / "checkpoints" / "step-000000002" / "state.json").write_text("{not json")
    checkpoints = Checkpointer(str(tmp_path / "checkpoints"))
    with pytest.raises(ValueError, match="step-000000002 cannot be restored"):
        checkpoints.check(2)
    with pytest.raises(ValueError, match="step-000000002 cannot be restored"):
        checkpoints.restore(model_and_data()[0], 2)


def test_a_pretrainer_with_unused_weights_resumes(tmp_path):
    """RoBERTa's objective never reaches the backbone's pooler; its checkpoint still restores.

    On one device Keras builds the optimizer lazily from the first update's
    variables; the Pretrainer builds it on every trainable variable (as under a
    strategy), which is what `Checkpointer.restore` rebuilds.
    """
    from tests.pretraining.matrix_cases import CASES

    make_pretrainer, make_batch = CASES["roberta"]
    data = tf.data.Dataset.from_tensors(make_batch()).repeat()

    def compiled():
        keras.utils.set_random_seed(3)
        model = make_pretrainer()
        model.compile(keras.optimizers.Adam(1e-3))
        return model

    straight = compiled()
    fit_resumable(straight, data, steps=3, out_dir=str(tmp_path / "a"), checkpoint_every=1,
                  verbose=0)
    first = compiled()
    fit_resumable(first, data, steps=2, out_dir=str(tmp_path / "b"), checkpoint_every=1,
                  verbose=0)
    resumed = compiled()
    assert fit_resumable(resumed, data, steps=3, out_dir=str(tmp_path / "b"),
                         checkpoint_every=1, verbose=0)["step"] == 3
    for got, want in zip(weights(resumed), weights(straight)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_unbuilt_model_resumes_from_batches_of_unknown_size(tmp_path):
    """The model is built from the data's spec by a symbolic call (as Keras' own build):
    a batch dimension of None is fine. It was built by a call on zeros, which refused it
    ("Batches need static shapes")."""
    def run(steps, out):
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])  # no Input: unbuilt
        model.compile(keras.optimizers.Adam(1e-2), "mse")
        x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
        data = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8)
        assert data.element_spec[0].shape.as_list() == [None, 4]
        fit_resumable(model, data.repeat(), steps=steps, out_dir=str(out), checkpoint_every=2,
                      verbose=0)
        return model

    straight = run(4, tmp_path / "a")
    run(2, tmp_path / "b")
    resumed = run(4, tmp_path / "b")
    for got, want in zip(weights(resumed), weights(straight)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
