"""Token ids checked once per input where the data enters a compiled step, on every input kind."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_ctx
from keras_ctx.models.checked_input import checked_token_ids
from keras_ctx.training import Checkpointer, fit_resumable
from keras_ctx.models import BertBackbone

from tests.cli_helpers import VOCAB, tiny_backbone


@pytest.fixture(scope="module")
def backbone():
    return BertBackbone(vocabulary_size=10, num_layers=1, num_heads=1, hidden_size=4,
                        intermediate_size=4, max_sequence_length=4)


def _two_token_batch(last_id):
    return {"token_ids": np.array([[1, last_id]], "int32"),
            "padding_mask": np.ones((1, 2), "int32")}


def test_an_iterator_is_checked_as_it_is_read(backbone):
    """A generator (what a JAX fit takes without TensorFlow) raises at the bad batch."""
    checked = checked_token_ids((b for b in (_two_token_batch(9), _two_token_batch(10))), backbone)
    assert next(checked)["token_ids"][0, 1] == 9
    with pytest.raises(ValueError, match=r"token_ids must be in \[0, 10\)"):
        next(checked)
    with pytest.raises(ValueError, match=r"must be in \[0, 10\)"):
        checked_token_ids(_two_token_batch(-1), backbone)


def test_an_input_is_checked_once(backbone):
    """fit_resumable and Pretrainer.fit both pass the data through: the second is a no-op."""
    dataset = tf.data.Dataset.from_tensors(_two_token_batch(3)).repeat(2)
    checked = checked_token_ids(dataset, backbone)
    assert checked is not dataset and checked_token_ids(checked, backbone) is checked
    assert [b["token_ids"][0, 1] for b in checked.as_numpy_iterator()] == [3, 3]
    iterator = checked_token_ids(iter([_two_token_batch(3)]), backbone)
    assert checked_token_ids(iterator, backbone) is iterator
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be in \[0, 10\)"):
        list(checked_token_ids(tf.data.Dataset.from_tensors(_two_token_batch(10)), backbone))


@pytest.mark.tensorflow_only("TensorFlow's in-graph check (InvalidArgumentError, no id in the "
                             "message); JAX's and torch's ValueError naming the id: "
                             "tests/layers/test_backend_switch.py")
def test_out_of_range_ids_raise_in_eager_naming_the_vocabulary_size():
    backbone = tiny_backbone()
    inputs = {"token_ids": np.array([[2, 5, -1]]), "padding_mask": np.ones((1, 3), "int32"),
              "segment_ids": np.zeros((1, 3), "int32")}
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"\\[0, {len(VOCAB)}\\)"):
        backbone(inputs)
    inputs["token_ids"] = np.array([[2, 5, len(VOCAB)]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary size") as error:
        backbone(inputs)
    from keras_ctx.common.errors import one_line

    assert one_line(error.value) == (
        f"The token ids of layer token_embedding must be in [0, {len(VOCAB)}) (the "
        "vocabulary size); an id outside it was given. Check the tokenizer matches the model.")


def test_out_of_range_ids_raise_under_jit_compile(tmp_path):
    from keras_ctx.pretraining import CausalLMPretrainer

    keras.utils.set_random_seed(0)
    backbone = keras_ctx.models.from_preset("gpt2", num_layers=1, hidden_size=32,
                                            num_heads=2, intermediate_size=64,
                                            vocabulary_size=50, max_sequence_length=16)
    pretrainer = CausalLMPretrainer(backbone)
    pretrainer.compile(keras.optimizers.Adam(1e-3), jit_compile=True)
    ids = np.full((4, 8), 60, "int32")  # XLA would clamp these to row 49
    dataset = tf.data.Dataset.from_tensors(
        {"token_ids": ids, "padding_mask": np.ones_like(ids)}).repeat()
    # tf.data is checked in the pipeline (TensorFlow's error), arrays in numpy (ValueError).
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                       match="token_ids must be in \\[0, 50\\)"):
        fit_resumable(pretrainer, dataset, steps=1, out_dir=str(tmp_path), verbose=0)
    assert not Checkpointer(str(tmp_path / "checkpoints")).steps()
    # A Pretrainer's own fit and evaluate (what users call) check them too,
    # and no weight moved (before: the step trained on row 49).
    before = [np.array(v) for v in backbone.weights]
    arrays = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    for run in (lambda: pretrainer.fit(dataset, steps_per_epoch=1, verbose=0),
                lambda: pretrainer.evaluate(dataset, steps=1, verbose=0),
                lambda: pretrainer.fit(arrays, batch_size=2, verbose=0)):
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                           match="token_ids must be in \\[0, 50\\)"):
            run()
    for old, new in zip(before, backbone.weights):
        np.testing.assert_array_equal(old, np.array(new))
    fine = tf.data.Dataset.from_tensors(
        {"token_ids": ids % 50, "padding_mask": np.ones_like(ids)}).repeat()
    assert np.isfinite(pretrainer.fit(fine, steps_per_epoch=1, verbose=0).history["loss"][0])


@pytest.mark.tensorflow_only("a SavedModel's in-graph checks, exported from TensorFlow (torch "
                             "refuses the export; JAX's: tests/export/test_export_jax.py)")
def test_serving_signatures_check_ids_int64_range_and_length(tmp_path):
    from keras_ctx.export import export_saved_model

    path = export_saved_model(tiny_backbone(), str(tmp_path), sequence_length=8)
    served = tf.saved_model.load(path)
    ids = np.full((1, 8), 5, "int32")
    ones = np.ones((1, 8), "int32")
    serve = served.signatures["serving_default"]
    ok = serve(token_ids=ids, padding_mask=ones, segment_ids=0 * ones)
    assert ok["sequence_output"].shape == (1, 8, 32)
    ids[0, 3] = -1
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"input token_ids must be in \\[0, {len(VOCAB)}\\)"):
        serve(token_ids=ids, padding_mask=ones, segment_ids=0 * ones)

    def example(token_id):
        features = {"token_ids": [5] * 7 + [token_id], "padding_mask": [1] * 8,
                    "segment_ids": [0] * 8}
        return tf.train.Example(features=tf.train.Features(feature={
            k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
            for k, v in features.items()})).SerializeToString()

    examples = served.signatures["serve_examples"]
    assert examples(examples=tf.constant([example(5)]))["sequence_output"].shape[0] == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside int32|must be in"):
        examples(examples=tf.constant([example(2**32 + 5)]))  # not wrapped to 5

    free = export_saved_model(tiny_backbone(), str(tmp_path / "free"))
    serve = tf.saved_model.load(free).signatures["serving_default"]
    long = np.full((1, 33), 5, "int32")
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the 32 positions the model has"):
        serve(token_ids=long, padding_mask=np.ones_like(long), segment_ids=0 * long)


def test_a_symbolic_build_checks_no_placeholder_values():
    """Keras builds a model from placeholders; on PyTorch, where a layer fails on the "meta"
    device (EinsumDense under mixed_float16), it reruns the call on uninitialised CPU
    tensors. Their garbage is not the user's data: no warning may blame the token ids."""
    from tests.pretraining.backend_cases import _batches
    from tests.pretraining.matrix_cases import CASES

    keras.config.set_dtype_policy("mixed_float16")  # the suite's fixture restores float32
    make, make_batch = CASES["bert"]
    model, batch = make(), make_batch()
    model.compile(optimizer=keras.optimizers.SGD(0.01))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(_batches(batch, 1), steps_per_epoch=1, epochs=1, verbose=0)
    blamed = [str(w.message) for w in caught if "token ids" in str(w.message)]
    assert not blamed, blamed[0][:400]
