"""ULMFiT's backward LM and the two directions' ensemble (Howard & Ruder 2018, Sec. 3.3).

The backward stream and classifier rows against fastai v1's `backwards=True`
(`LanguageModelPreLoader`, `pad_collate`, transcribed in tests/data/fastai_lm_reference.py),
the ensemble's probabilities against numpy's mean of the two classifiers', a backward LM
that learns, and a default `keras-ctx ulmfit` run that trains and saves both directions.
"""

import json

import keras
import numpy as np
import pytest

from tests.data import fastai_lm_reference as reference

NEUTRAL = pytest.mark.backend_neutral("ULMFiT's streams: Python and numpy")
# Hand-made documents of different lengths (fastai's rules make their words).
LINES = ["The cat sat on the mat.", "A DOG ran!", "the cat and the dog sat on a mat",
         "Mats are flat.", "Cats sat, dogs ran; the end."]


def _words_and_index():
    from keras_ctx.data.ulmfit_text import ulmfit_vocabulary, ulmfit_words

    documents = [ulmfit_words(line) for line in LINES]
    vocabulary = ulmfit_vocabulary(documents, min_freq=1)
    return documents, {w: i for i, w in enumerate(vocabulary)}, vocabulary


def _preloader_rows(items, backwards, bs=3, bptt=4):
    """fastai's rows over one epoch: each row's inputs in order, then its last target."""
    loader = reference.LanguageModelPreLoader(items, bs=bs, bptt=bptt, backwards=backwards)
    batches = list(loader.batches())
    return [np.concatenate([x[j] for x, _ in batches] + [batches[-1][1][j, -1:]])
            for j in range(bs)], loader.totalToks / bs


@NEUTRAL
def test_backward_stream_is_fastais_backwards_stream_and_each_document_reversed():
    from keras_ctx.data.ulmfit_text import lm_stream_ids, ulmfit_ids

    documents, index, vocabulary = _words_and_index()
    forward = lm_stream_ids(documents, index)
    backward = lm_stream_ids(documents, index, "backward")
    # By hand: the documents last to first, each one's words reversed (xxbos last).
    by_hand = [i for words in documents[::-1] for i in ulmfit_ids(words[::-1], index)]
    assert backward == by_hand == forward[::-1]
    assert [vocabulary[i] for i in backward[:4]] == [".", "end", "the", ";"]
    assert vocabulary[backward[-1]] == "xxbos" and vocabulary[forward[0]] == "xxbos"
    # fastai's rows (start int(step * j), read on, wrapping at the end) are runs of ours.
    items = [np.array(ulmfit_ids(words, index)) for words in documents]
    for ours, backwards in ((forward, False), (backward, True)):
        rows, step = _preloader_rows(items, backwards)
        circular = np.array(ours * 3)
        for j, row in enumerate(rows):
            start = int(step * j)
            np.testing.assert_array_equal(row, circular[start:start + len(row)])


@NEUTRAL
def test_backward_words_are_fastais_pad_collate_rows():
    from keras_ctx.data.ulmfit_text import directed, ulmfit_ids

    documents, index, _ = _words_and_index()
    samples = [(ulmfit_ids(words, index), 0) for words in documents]
    rows, _ = reference.pad_collate(samples, pad_idx=1, backwards=True)
    for words, row in zip(documents, rows):
        real = row[-len(words):]  # fastai: the padding first, the reversed text after it
        assert (row[:-len(words)] == 1).all()
        assert real.tolist() == ulmfit_ids(directed(words, "backward"), index)
    with pytest.raises(ValueError, match="one of"):
        directed(["a"], "sideways")


def test_reversed_tokens_reverses_each_rows_real_tokens_and_keeps_padding_right():
    from keras_ctx.tasks.direction_ensemble import ReversedTokens

    ids = np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12], [13, 0, 0, 0, 0]], "int32")
    mask = (ids > 0).astype("int32")
    got = keras.ops.convert_to_numpy(ReversedTokens()(ids, mask))
    np.testing.assert_array_equal(got, [[7, 6, 5, 0, 0], [12, 11, 10, 9, 8],
                                        [13, 0, 0, 0, 0]])


def _tiny_classifier(seed):
    from keras_ctx.models import AwdLstmBackbone
    from keras_ctx.tasks.transfer import ConcatPoolClassifier

    keras.utils.set_random_seed(seed)
    backbone = AwdLstmBackbone(30, embedding_size=6, hidden_size=8, num_layers=1,
                               lstm_implementation="loop")
    return ConcatPoolClassifier(backbone, 3)


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.runs_on("tensorflow", "torch", reason="eager calls: on JAX each op compiles on "
                     "its own (10 s); ReversedTokens, the ensemble's one op of its own, runs there")
def test_ensemble_probabilities_are_the_mean_of_both_classifiers(tmp_path):
    from keras_ctx.tasks.direction_ensemble import DirectionEnsemble

    forward, backward = _tiny_classifier(0), _tiny_classifier(1)
    ids = np.array([[2, 3, 4, 5, 0, 0], [6, 7, 8, 9, 10, 11], [12, 13, 0, 0, 0, 0]], "int32")
    mask = (ids > 0).astype("int32")
    reversed_ids = np.zeros_like(ids)  # each row's real tokens reversed, in numpy
    for row, n in enumerate(mask.sum(1)):
        reversed_ids[row, :n] = ids[row, :n][::-1]
    x = {"token_ids": ids, "padding_mask": mask}

    def outputs(model, inputs):  # called, not predict(): no step to compile (< 5 s)
        return keras.ops.convert_to_numpy(model(inputs, training=False))

    p_forward = _softmax(outputs(forward, x))
    p_backward = _softmax(outputs(backward, {"token_ids": reversed_ids, "padding_mask": mask}))
    ensemble = DirectionEnsemble([forward, backward], ["forward", "backward"])
    want = (p_forward + p_backward) / 2
    assert np.abs(p_forward - p_backward).max() > 1e-3  # two different classifiers
    np.testing.assert_allclose(_softmax(outputs(ensemble, x)), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs(ensemble, x), np.log(want), rtol=1e-5, atol=1e-5)
    path = tmp_path / "ensemble.keras"
    ensemble.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, DirectionEnsemble) and loaded.directions == ["forward", "backward"]
    np.testing.assert_allclose(_softmax(outputs(loaded, x)), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one of"):
        DirectionEnsemble([forward], ["sideways"])


@pytest.mark.slow
def test_backward_language_model_loss_falls():
    from keras_ctx.commands.ulmfit import _lm_dataset
    from keras_ctx.models import AwdLstmBackbone
    from keras_ctx.tasks.ulmfit import fine_tune_language_model

    # A text whose next word is predictable read backwards too: "a b c d" cycles.
    documents = [["xxbos"] + "a b c d a b c d".split()] * 40
    index = {w: i for i, w in enumerate(["xxpad", "xxunk", "xxbos", "a", "b", "c", "d"])}
    stream = _lm_dataset(documents, index, 8, 4, direction="backward")
    assert stream.streams[0][:5].tolist() == [6, 5, 4, 3, 6]  # d c b a d: read from the end
    keras.utils.set_random_seed(0)
    backbone = AwdLstmBackbone(7, embedding_size=8, hidden_size=16, num_layers=1,
                               embedding_dropout=0.0, input_dropout=0.0, hidden_dropout=0.0,
                               weight_dropout=0.0, output_dropout=0.0,
                               lstm_implementation="loop")
    history = []
    lm = fine_tune_language_model(
        backbone, stream, epochs=6, learning_rate=0.1, verbose=0,
        callbacks=[keras.callbacks.LambdaCallback(
            on_epoch_end=lambda epoch, logs: history.append(logs["lm_loss"]))])
    assert lm.backbone is backbone
    # From about log 7 = 1.95 (uniform over the words; measured 1.85 after the first
    # epoch) to well under it (measured 0.78 after the sixth).
    assert 1.5 < history[0] < 2.0 and history[-1] < 0.6 * history[0], history


@pytest.mark.slow
@pytest.mark.tensorflow_only("keras-ctx ulmfit's classifier data is a tf.data pipeline")
def test_default_ulmfit_run_trains_and_saves_both_directions(tmp_path, capsys):
    from keras_ctx.cli import main
    from keras_ctx.data.ulmfit_text import ulmfit_words
    from keras_ctx.tasks.direction_ensemble import DirectionEnsemble
    from keras_ctx.tasks.transfer import ConcatPoolClassifier

    lines = ["The cat sat on the mat.", "the DOG sat on the cat!"] * 30
    text = tmp_path / "t.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    train = tmp_path / "l.tsv"
    train.write_text("".join(f"{line}\t{'ab'[k % 2]}\n" for k, line in enumerate(lines[:16])),
                     encoding="utf-8")
    small = ["--batch-size", "4", "--sequence-length", "8", "--set", "embedding_size=8",
             "--set", "hidden_size=8", "--set", "num_layers=1"]
    out = tmp_path / "both"
    assert main(["ulmfit", "--text", str(text), "--train", str(train), "--out", str(out),
                 *small]) == 0
    printed = capsys.readouterr().out
    assert "forward then backward" in printed and "averages the two's probabilities" in printed
    for direction in ("forward", "backward"):
        for stage in ("stage 2, target LM fine-tuning", "stage 3, the classifier"):
            assert f"{direction}: {stage}" in printed
    assert json.loads((out / "vocabulary.json").read_text())["directions"] == [
        "forward", "backward"]
    ensemble = keras.saving.load_model(out / "classifier.keras")
    assert isinstance(ensemble, DirectionEnsemble)
    assert ensemble.directions == ["forward", "backward"]
    # Each direction trains from the same seed as it would alone: the forward half is the
    # --directions forward run's classifier.
    alone = tmp_path / "forward"
    assert main(["ulmfit", "--text", str(text), "--train", str(train), "--out", str(alone),
                 "--directions", "forward", *small]) == 0
    forward = keras.saving.load_model(alone / "classifier.keras")
    assert isinstance(forward, ConcatPoolClassifier)
    for a, b in zip(ensemble.classifiers[0].weights, forward.weights):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    saved = json.loads((out / "vocabulary.json").read_text())
    index = {w: i for i, w in enumerate(saved["words"])}
    ids = np.array([[index.get(w, 1) for w in ulmfit_words(lines[0])]], "int32")
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    p_forward = _softmax(forward.predict(x, verbose=0))
    p_backward = _softmax(ensemble.classifiers[1].predict(
        {"token_ids": ids[:, ::-1].copy(), "padding_mask": x["padding_mask"]}, verbose=0))
    np.testing.assert_allclose(_softmax(ensemble.predict(x, verbose=0)),
                               (p_forward + p_backward) / 2, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.tensorflow_only("SavedModel export")
def test_exported_ensemble_serves_the_mean_probabilities(tmp_path):
    import tensorflow as tf

    from keras_ctx.cli import main
    from keras_ctx.tasks.direction_ensemble import DirectionEnsemble

    forward, backward = _tiny_classifier(0), _tiny_classifier(1)
    run = tmp_path / "ulmfit"
    run.mkdir()
    DirectionEnsemble([forward, backward], ["forward", "backward"]).save(run / "classifier.keras")
    assert main(["export", str(run), str(tmp_path / "exported")]) == 0  # as `keras-ctx ulmfit` saves it
    serve = tf.saved_model.load(str(tmp_path / "exported" / "1")).signatures["serving_default"]
    ids = np.array([[2, 3, 4, 0], [5, 6, 7, 8]], "int32")
    mask = (ids > 0).astype("int32")
    served = serve(token_ids=tf.constant(ids), padding_mask=tf.constant(mask))
    reversed_ids = np.array([[4, 3, 2, 0], [8, 7, 6, 5]], "int32")
    want = (_softmax(keras.ops.convert_to_numpy(forward({"token_ids": ids, "padding_mask": mask})))
            + _softmax(keras.ops.convert_to_numpy(
                backward({"token_ids": reversed_ids, "padding_mask": mask})))) / 2
    np.testing.assert_allclose(served["probabilities"].numpy(), want, rtol=1e-5, atol=1e-6)
