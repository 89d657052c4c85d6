"""Labels that look like regression targets are refused by the classifier paths, naming
the file and row (issue 53): each distinct score became a class (finetune) or was
truncated to a class id (TextClassifier.fit)."""

import numpy as np
import pytest

from keras_ctx.common.errors import DataError
from keras_ctx.data.labelled import read_labelled_tsv

from tests.tasks import text_fixtures
from tests.cli_helpers import one_line_error, run_cli


def _tsv(path, labels):
    texts = ["the cat sat", "a dog ran", "birds sang", "old trees", "a river bank", "loans"]
    path.write_text("".join(f"{texts[i % len(texts)]} {i}\t{label}\n"
                            for i, label in enumerate(labels)), encoding="utf-8")
    return path


@pytest.mark.parametrize("labels, line, label", [
    (["0.5", "3.7", "0.5", "3.7"], 1, "0.5"),   # the first line: not taken for a header
    (["1", "2", "2.5", "1"], 3, "2.5"),
    (["1", "2", "1e-3", "2"], 3, "1e-3"),
    (["pos", "neg", "nan", "pos"], 3, "nan"),
])
def test_a_score_among_the_labels_is_refused_naming_the_line(tmp_path, labels, line, label):
    path = _tsv(tmp_path / "train.tsv", labels)
    with pytest.raises(DataError) as error:
        read_labelled_tsv(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: the label {label!r} is a number with a "
                              "fraction")
    assert "bin the scores" in message and "\n" not in message


def test_whole_numbers_written_as_floats_stay_classes(tmp_path):
    path = _tsv(tmp_path / "train.tsv", ["1.0", "0.0", "1.0", "0.0"])
    assert read_labelled_tsv(path, header=False)[1] == ["1.0", "0.0", "1.0", "0.0"]


def test_finetune_refuses_scores_in_one_line_before_out_is_made(tmp_path, capsys):
    path = _tsv(tmp_path / "scores.tsv", ["0.25", "0.75", "0.25", "0.75", "0.1", "0.9"])
    out = tmp_path / "out"
    code, output = run_cli(capsys, "finetune", str(tmp_path / "run"), "--train", str(path),
                           "--out", str(out))
    assert code == 2
    assert f"{path}:1: the label '0.25' is a number with a fraction" in one_line_error(output)
    assert not out.exists()


@pytest.fixture(scope="module")
def classifier():
    from keras_ctx.tasks.text import TextClassifier

    task = TextClassifier(text_fixtures.backbone("bert"), text_fixtures.tokenizer("bert"),
                          num_classes=3, sequence_length=12)
    task.compile()  # sparse cross-entropy: its labels are class ids
    return task


@pytest.mark.parametrize("y, message", [
    ([0.5, 2.0], "y[0] is 0.5, a number with a fraction"),
    ([1.0, float("nan")], "y[1] is nan, a number with a fraction"),
    ([0, 3], "y[1] is 3, outside the class ids 0..2"),
    ([-1, 0], "y[0] is -1, outside the class ids 0..2"),
    (["pos", "neg"], "give class ids 0..2"),
])
def test_text_classifier_refuses_labels_that_are_not_its_class_ids(classifier, y, message):
    weights = [w.copy() for w in classifier.model.get_weights()]
    with pytest.raises(ValueError) as error:
        classifier.fit(["a text", "another"], y, epochs=1, verbose=0)
    assert message in str(error.value)
    for got, want in zip(classifier.model.get_weights(), weights):
        np.testing.assert_array_equal(got, want)


def test_text_classifier_takes_whole_numbers_in_range(classifier):
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("string-in tasks run on TensorFlow (docs/backends.md)")
    assert classifier._dataset(["a text", "another"], np.array([2.0, 0.0])) is not None


def _id_classifier(loss):
    from keras_ctx.tasks.heads import SequenceClassifier

    model = SequenceClassifier(text_fixtures.backbone("bert"), num_classes=3 if loss else 1)
    model.compile("adam", loss or "mse")
    return model


def _ids(rows):
    return {"token_ids": np.full((rows, 8), 5, "int32"),
            "padding_mask": np.ones((rows, 8), "int32"),
            "segment_ids": np.zeros((rows, 8), "int32")}


@pytest.mark.parametrize("door", ["fit", "evaluate", "train_on_batch", "test_on_batch"])
@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy", "sparse_ce_object"])
def test_the_id_level_classifier_refuses_scores_at_every_door(door, loss):
    import keras

    if loss == "sparse_ce_object":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = _id_classifier(loss)
    weights = [w.copy() for w in model.get_weights()]
    kwargs = {"verbose": 0} if door in ("fit", "evaluate") else {}
    with pytest.raises(ValueError, match=r"y\[1\] is 3.7, a number with a fraction"):
        getattr(model, door)(_ids(2), np.array([1.0, 3.7]), **kwargs)
    for got, want in zip(model.get_weights(), weights):
        np.testing.assert_array_equal(got, want)


def test_a_regression_head_of_ones_own_takes_scores():
    """A 1-unit head compiled with mean squared error is a regression: its targets are the
    user's to choose."""
    model = _id_classifier(None)
    model.fit(_ids(2), np.array([0.5, 3.7]), epochs=1, verbose=0)
