"""Cross-view training: the restricted views, the alternating updates, and its effect."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.common.errors import ConfigError
from keras_ctx.models.cvt import AUXILIARY_VIEWS, CvtEncoder, auxiliary_views, view_weights
from keras_ctx.data.cvt import cvt_dataset
from keras_ctx.pretraining.cvt import CrossViewTrainer
from tests.autodiff import value_and_gradients
from tests.execution import FEW_STEPS, GRADIENTS

CHARS = 6


def _encoder(vocabulary_size=30, dropout=0.0, **overrides):
    config = dict(embedding_size=8, first_layer_size=8, second_layer_size=6,
                  filters=[[2, 4]], character_embedding_size=4,
                  max_characters_per_token=CHARS, dropout=dropout, lstm_implementation="loop")
    config.update(overrides)
    return CvtEncoder(vocabulary_size, **config)


def _word_characters(vocabulary_size, seed=0):
    """A fixed random spelling per word id (row 0: padding)."""
    table = np.random.default_rng(seed).integers(1, 262, (vocabulary_size, CHARS))
    table[0] = 0
    return table.astype("int32")


def _character_inputs(ids, spelling):
    mask = (ids > 0).astype("int32")
    return {"token_ids": ids.astype("int32"), "character_ids": spelling[ids],
            "padding_mask": mask}


def test_auxiliary_views_shift_the_first_layer():
    forward = np.arange(1, 13, dtype="float32").reshape(1, 4, 3)
    backward = -forward
    full = np.ones((1, 4, 5), "float32")
    views = {k: keras.ops.convert_to_numpy(v) for k, v in auxiliary_views(
        {"forward_states": forward, "backward_states": backward,
         "sequence_output": full}).items()}
    assert set(views) == {"full", "forward", "backward", "future", "past"}
    np.testing.assert_array_equal(views["full"], full)
    np.testing.assert_array_equal(views["forward"], forward)
    np.testing.assert_array_equal(views["backward"], backward)
    np.testing.assert_array_equal(views["future"][0, 1:], forward[0, :-1])  # h1->_(t-1)
    np.testing.assert_array_equal(views["past"][0, :-1], backward[0, 1:])  # h1<-_(t+1)
    assert not views["future"][0, 0].any() and not views["past"][0, -1].any()
    # The positions a view has no input for are out of its loss (cvt_text's rolled mask).
    weights = {k: keras.ops.convert_to_numpy(v) for k, v in
               view_weights(np.array([[1, 1, 1, 0]])).items()}
    np.testing.assert_array_equal(weights["future"], [[0, 1, 1, 0]])
    np.testing.assert_array_equal(weights["past"], [[1, 1, 0, 0]])
    np.testing.assert_array_equal(weights["full"], [[1, 1, 1, 0]])


def test_each_view_depends_on_exactly_the_tokens_the_paper_says():
    """D[view][t, s]: does the module's prediction at t change when word s changes?"""
    spelling = _word_characters(30)
    trainer = CrossViewTrainer(_encoder(), 3, hidden_size=8)
    length = 6
    ids = np.random.default_rng(1).integers(1, 30, (1, length))

    def views(token_ids):
        outputs = trainer(_character_inputs(token_ids, spelling))
        return {view: keras.ops.convert_to_numpy(outputs[f"tags_{view}"])[0]
                for view in AUXILIARY_VIEWS}

    before = views(ids)
    depends = {view: np.zeros((length, length), bool) for view in AUXILIARY_VIEWS}
    for s in range(length):
        changed = ids.copy()
        changed[0, s] = ids[0, s] % 29 + 1
        after = views(changed)
        for view in AUXILIARY_VIEWS:
            depends[view][:, s] = np.abs(after[view] - before[view]).max(-1) > 1e-7
    t, s = np.indices((length, length))
    np.testing.assert_array_equal(depends["forward"], s <= t)  # left context and x_t
    np.testing.assert_array_equal(depends["backward"], s >= t)  # right context and x_t
    np.testing.assert_array_equal(depends["future"], s < t)  # left context only
    np.testing.assert_array_equal(depends["past"], s > t)  # right context only
    assert depends["full"].all()  # both layers, both directions


def test_full_module_is_linear_and_the_others_are_not():
    from keras_ctx.models.cvt import PredictionModule

    x = np.random.default_rng(0).normal(size=(1, 3, 4)).astype("float32")
    for activate, linear in ((False, True), (True, False)):
        module = PredictionModule(3, 8, activate=activate)
        f = lambda v: keras.ops.convert_to_numpy(module(v))  # noqa: E731
        zero = f(np.zeros_like(x))
        assert np.allclose(f(-x) - zero, -(f(x) - zero), atol=1e-5) == linear


def _tagging_batch(rng, spelling, rows=4, length=7, labels=3):
    ids = rng.integers(1, 30, (rows, length))
    ids[1, 5:] = 0
    return _character_inputs(ids, spelling), rng.integers(0, labels, (rows, length)).astype("int32")


def test_each_loss_reaches_only_its_modules():
    spelling = _word_characters(30)
    trainer = CrossViewTrainer(_encoder(dropout=0.5), {"a": 3, "b": 2}, hidden_size=8)
    x, y = _tagging_batch(np.random.default_rng(0), spelling)

    def reached(losses_fn):
        losses_fn()  # builds what the losses call (JAX creates no variables in a trace)
        variables = trainer.trainable_variables
        _, _, grads = value_and_gradients(lambda: sum(losses_fn().values()),
                                          variables=variables, compiled=GRADIENTS)
        return {v.path.split("/")[0] for v, g in zip(variables, grads)
                if g is not None and np.any(g)}

    supervised = reached(lambda: trainer.supervised_losses(x, y, "a", training=True))
    assert "a_primary" in supervised and not supervised & {
        "b_primary", *(f"{t}_{v}" for t in "ab" for v in AUXILIARY_VIEWS)}
    unlabelled = reached(lambda: trainer.cvt_losses(x))
    # Primary modules frozen (stop_gradient); all ten auxiliary modules learn.
    assert not unlabelled & {"a_primary", "b_primary"}
    assert {f"{t}_{v}" for t in "ab" for v in AUXILIARY_VIEWS} <= unlabelled
    assert any(name in unlabelled for name in ("forward_lstm_1", "token_embedding"))


def test_kl_to_the_primary_is_zero_when_a_module_copies_it():
    from keras_ctx.pretraining.cvt import _kl

    p = np.array([[0.2, 0.5, 0.3]], "float32")
    np.testing.assert_allclose(_kl(p, np.log(p)), [0.0], atol=1e-6)
    q = np.array([[1.0, 0.0, 0.0]], "float32")
    want = (p * (np.log(p) - np.log(np.exp(q) / np.exp(q).sum()))).sum()
    np.testing.assert_allclose(_kl(p, q), [want], rtol=1e-5)


def _alternation(tasks):
    spelling = _word_characters(30)
    rng = np.random.default_rng(0)
    trainer = CrossViewTrainer(_encoder(), tasks, hidden_size=8)
    x, y = _tagging_batch(rng, spelling)
    u, _ = _tagging_batch(rng, spelling)
    labelled = {t: tf.data.Dataset.from_tensors((x, y % n)) for t, n in tasks.items()}
    data = cvt_dataset(labelled, tf.data.Dataset.from_tensors(u),
                       sizes={t: 10 for t in tasks})
    trainer.compile(keras.optimizers.SGD(0.1))
    history = trainer.fit(data, steps_per_epoch=2, epochs=1, verbose=0).history
    # L, U per step: one labelled update (of the drawn task, cvt_text's), one unlabelled.
    assert int(trainer.optimizer.iterations) == 2 * 2
    assert history["cvt_loss"][0] > 0 and history["supervised_loss"][0] > 0


def test_one_step_alternates_labelled_and_unlabelled_updates():
    _alternation({"tags": 3})
    u = {"token_ids": np.ones((2, 3), "int32")}
    with pytest.raises(ValueError, match="pass {task: dataset}"):
        cvt_dataset(tf.data.Dataset.from_tensors((u, u["token_ids"])),
                    tf.data.Dataset.from_tensors(u), task_names=["a", "b"])


@pytest.mark.slow
def test_multi_task_steps_alternate_over_tasks():
    _alternation({"a": 3, "b": 2})


# ---------------------------------------------------------------- the effect

def synthetic_tagging(seed, vocabulary_size=120, classes=4, length=10, stay=0.3):
    """Word classes in a Markov chain; the tag of a word is its class.

    Each word belongs to one class (its tag). Class sequences move to the
    next class with probability 1 - stay, so the context predicts a tag only
    in part and the word's identity decides it; spellings are random, so the
    characters do not give the class away. With few labelled sentences many
    words are never seen labelled: only unlabelled text tells the encoder
    which words behave alike.
    """
    rng = np.random.default_rng(seed)
    word_class = rng.integers(0, classes, vocabulary_size)
    word_class[0] = 0
    members = [np.flatnonzero(word_class[1:] == c) + 1 for c in range(classes)]

    def sentences(count):
        tags = np.zeros((count, length), "int32")
        tags[:, 0] = rng.integers(0, classes, count)
        for t in range(1, length):
            move = rng.random(count) > stay
            tags[:, t] = np.where(move, (tags[:, t - 1] + 1) % classes, tags[:, t - 1])
        ids = np.vectorize(lambda c: rng.choice(members[c]))(tags)
        return ids.astype("int32"), tags

    return sentences, word_class


def _fit_and_score(seed, use_unlabelled, labelled_rows=16, unlabelled_rows=2000,
                   steps=300, batch=16):
    keras.utils.set_random_seed(seed)
    sentences, _ = synthetic_tagging(seed)
    spelling = _word_characters(120, seed)
    train_ids, train_tags = sentences(labelled_rows)
    unlabelled_ids, _ = sentences(unlabelled_rows)
    test_ids, test_tags = sentences(500)
    encoder = _encoder(120, dropout=0.5, embedding_size=16, first_layer_size=32,
                       second_layer_size=16)
    trainer = CrossViewTrainer(encoder, 4, hidden_size=32)
    labelled = tf.data.Dataset.from_tensor_slices(
        (_character_inputs(train_ids, spelling), train_tags)).shuffle(64, seed=seed).batch(
        batch, drop_remainder=True)
    unlabelled = tf.data.Dataset.from_tensor_slices(
        _character_inputs(unlabelled_ids, spelling)).shuffle(2000, seed=seed).batch(
        batch, drop_remainder=True)
    if not use_unlabelled:
        # The same labelled updates, none on unlabelled data.
        trainer.train_step = lambda data: super(CrossViewTrainer, trainer).train_step(
            {"branch": "tags", "inputs": data["labelled"]["tags"][0],
             "labels": data["labelled"]["tags"][1]})
    trainer.compile(keras.optimizers.Adam(2e-3, clipnorm=1.0))
    trainer.fit(cvt_dataset(labelled, unlabelled), steps_per_epoch=steps, epochs=1,
                verbose=0)
    predictions = keras.ops.convert_to_numpy(trainer(_character_inputs(test_ids, spelling))["tags"])
    return float((predictions.argmax(-1) == test_tags).mean())


@pytest.mark.slow
def test_cvt_beats_supervised_training_with_few_labels():
    seeds = [0, 1, 2]
    supervised = [_fit_and_score(s, use_unlabelled=False) for s in seeds]
    cvt = [_fit_and_score(s, use_unlabelled=True) for s in seeds]
    print(f"token accuracy, supervised {np.mean(supervised):.3f} {supervised}; "
          f"CVT {np.mean(cvt):.3f} {cvt}")
    assert np.mean(cvt) > np.mean(supervised) + 0.05


def _write_corpus(tmp_path):
    tagged = tmp_path / "tagged.tsv"
    tagged.write_text("the\tO\nbank\tB\n\nriver\tA\nbank\tB\n", encoding="utf-8")
    untagged = tmp_path / "untagged.txt"
    untagged.write_text("the river bank\nbank of the river\n" * 8, encoding="utf-8")
    return str(tagged), str(untagged)


def test_cvt_command_refuses_a_used_out_directory_and_bad_tsv(tmp_path, capsys):
    from keras_ctx.cli import main
    from keras_ctx.tasks.cvt_tagger import read_tagged_tsv

    tagged, untagged = _write_corpus(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert main(["cvt", "--train", tagged, "--unlabelled", untagged, "--out", str(out)]) == 2
    assert (out / "mine.txt").read_text() == "keep me"
    assert "is not empty: choose a new --out" in capsys.readouterr().err
    bad = tmp_path / "bad.tsv"
    bad.write_text("no tab here\n")
    with pytest.raises(ValueError, match="bad.tsv:1: expected exactly token<TAB>tag"):
        read_tagged_tsv(str(bad))


@pytest.mark.slow
def test_cvt_command_trains_and_saves(tmp_path, capsys):
    import json

    from keras_ctx.cli import main

    tagged, untagged = _write_corpus(tmp_path)
    out = tmp_path / "out"
    assert main(["cvt", "--train", tagged, "--unlabelled", untagged, "--out", str(out),
                 "--steps", "2", "--batch-size", "2", "--set", "embedding_size=8",
                 "--set", "first_layer_size=8", "--set", "second_layer_size=8",
                 "--set", "filters=[[2,4]]", "--set", "character_embedding_size=4"]) == 0
    assert json.loads((out / "vocabulary.json").read_text())["tags"] == ["A", "B", "O"]
    assert (out / "encoder.keras").is_file() and (out / "tagger.weights.h5").is_file()
    # The saved tagger tags: one line per line, every word with one of the tags.
    assert main(["cvt-tag", str(out), "--input", untagged]) == 0
    lines = capsys.readouterr().out.splitlines()[-16:]
    assert len(lines) == 16 and lines[0].split()[0].rsplit("/", 1)[1] in ("A", "B", "O")


def test_config_round_trip():
    trainer = CrossViewTrainer(_encoder(), {"a": 3, "b": 2}, hidden_size=8)
    copy = CrossViewTrainer.from_config(trainer.get_config())
    assert copy.tasks == {"a": 3, "b": 2} and copy.hidden_size == 8
    assert (copy.labelled_dropout, copy.unlabelled_dropout, copy.label_smoothing) == (
        0.0, 0.2, 0.1)
    assert copy.count_params() == trainer.count_params()


@pytest.mark.parametrize("tasks, message", [
    ({"a": 0}, "`tasks['a']` must be a positive integer, got 0."),
    ({"a": 3, "b": 2.0}, "`tasks['b']` must be a positive integer, got 2.0."),
    ({"a": True}, "`tasks['a']` must be a positive integer, got True."),
    (0, "`tasks['tags']` must be a positive integer, got 0."),
    ({}, "`tasks` must be a label count or a non-empty mapping of task names to label "
         "counts, got {}."),
    (["a"], "`tasks` must be a label count or a non-empty mapping of task names to label "
            "counts, got ['a']."),
    ({"__unlabelled__": 2}, "`tasks` must be without a task named '__unlabelled__' (the "
     "unlabelled batches' branch): rename that task, got {'__unlabelled__': 2}."),
])
def test_bad_tasks_are_refused_in_one_message(tasks, message):
    with pytest.raises(ConfigError) as caught:
        CrossViewTrainer(_encoder(), tasks)
    assert str(caught.value) == message


# ---------------------------------------------------------------- as released (cvt_text)

def test_default_sizes_count_as_cvt_text_builds_them():
    """cvt_text's TF1 cells: LSTMCell(n, num_proj=p) has W ([x; h_p] -> 4n), b (4n) and
    a projection n x p without bias; the char CNN conv1d(100, w) per width."""
    vocabulary, chars = 100, 262
    # Shapes only: variables made in a StatelessScope skip their initializers (on JAX one
    # compiled program per weight shape).
    with keras.StatelessScope():
        encoder = CvtEncoder(vocabulary)
        trainer = CrossViewTrainer(encoder, 9)

    def lstm(inputs, cells, projection):
        return (inputs + projection) * 4 * cells + 4 * cells + cells * projection

    embeddings = vocabulary * 300 + 1 + chars * 50  # + emb_scale
    cnn = sum(w * 50 * 100 + 100 for w in (2, 3, 4))
    first = 2 * lstm(300 + 300, 1024, 512)
    second = 2 * lstm(2 * 512, 512, 512)
    assert encoder.count_params() == embeddings + cnn + first + second
    assert encoder.output_sizes == (512, 2048)  # [h1; h2] = 2 x 512 + 2 x 512
    module = lambda inputs: inputs * 512 + 512 + 512 * 9 + 9  # noqa: E731
    heads = module(2048) + module(2048) + 4 * module(512)  # primary, full, 4 restricted
    assert trainer.count_params() == encoder.count_params() + heads
    assert (trainer.labelled_dropout, trainer.unlabelled_dropout,
            trainer.label_smoothing) == (0.5, 0.2, 0.1)


@pytest.mark.parametrize("step", [0, 1, 7, 100, 2500, 4999, 5000, 5001, 12345, 100000])
def test_learning_rate_matches_cvt_text_point_by_point(step):
    import math

    from keras_ctx.pretraining.cvt import CvtLearningRate

    # model/multitask_model.py: lr * min(step, warm_up) / warm_up / (1 + decay sqrt(step)).
    want = 0.5 * min(step, 5000) / 5000 * 1 / (1 + 0.005 * math.sqrt(step))
    assert float(CvtLearningRate()(step)) == pytest.approx(want, rel=1e-6, abs=1e-12)


def test_cvt_optimizer_is_momentum_sgd_with_clipping_and_an_average():
    from keras_ctx.pretraining.cvt import CvtLearningRate, cvt_optimizer

    optimizer = cvt_optimizer(warm_up_steps=1)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert optimizer.momentum == 0.9 and optimizer.global_clipnorm == 1.0
    assert optimizer.use_ema and optimizer.ema_momentum == 0.998
    assert isinstance(optimizer._learning_rate, CvtLearningRate)
    # After fit the weights are the moving average (evaluation on the EMA weights).
    spelling = _word_characters(30)
    rng = np.random.default_rng(0)
    trainer = CrossViewTrainer(_encoder(), 3, hidden_size=8)
    x, y = _tagging_batch(rng, spelling)
    trainer.compile(optimizer, **FEW_STEPS)
    trainer.fit(cvt_dataset(tf.data.Dataset.from_tensors((x, y)),
                            tf.data.Dataset.from_tensors(x)), steps_per_epoch=3, verbose=0)
    averages = {optimizer._var_key(v): a for v, a in zip(
        optimizer._trainable_variables, optimizer._model_variables_moving_average)}
    moved = 0
    for variable in trainer.trainable_variables:
        average = keras.ops.convert_to_numpy(averages[optimizer._var_key(variable)])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), average, rtol=1e-6)
        moved += 1
    assert moved == len(trainer.trainable_variables)


def test_labelled_and_unlabelled_batches_drop_at_their_own_rates():
    spelling = _word_characters(30)
    encoder = _encoder(dropout=0.5, first_layer_size=64, second_layer_size=8)
    trainer = CrossViewTrainer(encoder, 3, hidden_size=8)
    x, y = _tagging_batch(np.random.default_rng(0), spelling, rows=16, length=10)
    x["padding_mask"][:] = 1
    calls = []
    forward = encoder.forward_pass

    def recording(inputs, dropout=None, training=None):
        outputs = forward(inputs, dropout, training)
        zeros = float(np.mean(keras.ops.convert_to_numpy(outputs["forward_states"]) == 0))
        calls.append((bool(training), zeros))
        return outputs

    encoder.forward_pass = recording
    trainer.supervised_losses(x, y, "tags", training=True)
    trainer.cvt_losses(x)
    (labelled_training, labelled), (teacher_training, teacher), (student_training, student) = calls
    assert labelled_training and abs(labelled - 0.5) < 0.03  # labeled_keep_prob 0.5
    assert not teacher_training and teacher == 0.0  # the teacher: no dropout
    assert student_training and abs(student - 0.2) < 0.03  # unlabeled_keep_prob 0.8


def test_label_smoothing_only_on_labelled_training_batches():
    spelling = _word_characters(30)
    trainer = CrossViewTrainer(_encoder(), 3, hidden_size=8)
    x, y = _tagging_batch(np.random.default_rng(2), spelling)
    logits = keras.ops.convert_to_numpy(trainer(x)["tags"]).astype("float64")
    log_q = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    mask = x["padding_mask"].astype(bool)
    nll = -np.take_along_axis(log_q, y[..., None], -1)[..., 0]
    smoothed = 0.9 * nll - 0.1 * log_q.mean(-1)  # targets 0.9 onehot + 0.1 / 3
    got = trainer.supervised_losses(x, y, "tags", training=True)["supervised"]
    assert float(got) == pytest.approx(smoothed[mask].mean(), rel=1e-5)
    got = trainer.supervised_losses(x, y, "tags", training=False)["supervised"]
    assert float(got) == pytest.approx(nll[mask].mean(), rel=1e-5)


# ---------------------------------------------------------------- keras-ctx cvt-tag

def _saved_tagger(tmp_path):
    from keras_ctx.tasks.cvt_tagger import save_cvt_tagger

    trainer = CrossViewTrainer(_encoder(max_characters_per_token=50), 3, hidden_size=8)
    logits = trainer.primary[0].output_layer
    # Tag "B" wins everywhere: the ground truth does not depend on the encoder.
    logits.kernel.assign(np.zeros(logits.kernel.shape, "float32"))
    logits.bias.assign(np.array([0.0, 5.0, 0.0], "float32"))
    run = tmp_path / "run"
    save_cvt_tagger(trainer, ["the", "river", "bank"], ["A", "B", "O"], str(run))
    return str(run)


def test_cvt_tag_prints_one_tagged_line_per_input_line(tmp_path, capsys):
    from keras_ctx.cli import main

    run = _saved_tagger(tmp_path)
    text = tmp_path / "in.txt"
    text.write_text("the river bank\n\nunseen words here too\n", encoding="utf-8")
    assert main(["cvt-tag", run, "--input", str(text)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["the/B river/B bank/B", "", "unseen/B words/B here/B too/B"]


def test_cvt_tag_refuses_bad_input_with_one_line(tmp_path, capsys):
    from keras_ctx.cli import main

    run = _saved_tagger(tmp_path)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    cases = [([str(tmp_path), "--input", str(latin)], "not a `keras-ctx cvt` run directory"),
             ([run, "--input", str(latin)], "latin1.txt is not UTF-8 text"),
             ([run, "--input", str(blank)], "blank.txt has no sentences"),
             ([run, "--input", str(tmp_path / "missing.txt")], "No such file"),
             ([run, "--input", str(blank), "--batch-size", "0"], "--batch-size")]
    for args, message in cases:
        assert main(["cvt-tag", *args]) == 2
        captured = capsys.readouterr()
        assert message in captured.err and len(captured.err.strip().splitlines()) == 1
        assert captured.out == ""
