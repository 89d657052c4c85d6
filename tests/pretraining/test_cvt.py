"""Cross-view training: the restricted views, the alternating updates, and its effect."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.models.cvt import AUXILIARY_VIEWS, CvtEncoder, auxiliary_views
from keras_ctx.pretraining.cvt import CrossViewTrainer, cvt_dataset

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


def _inputs(ids, spelling):
    mask = (ids > 0).astype("int32")
    return {"token_ids": ids.astype("int32"), "character_ids": spelling[ids],
            "padding_mask": mask}


def test_auxiliary_views_shift_the_first_layer():
    forward = np.arange(1, 13, dtype="float32").reshape(1, 4, 3)
    backward = -forward
    views = {k: keras.ops.convert_to_numpy(v) for k, v in auxiliary_views(forward,
                                                                          backward).items()}
    np.testing.assert_array_equal(views["forward"], forward)
    np.testing.assert_array_equal(views["backward"], backward)
    np.testing.assert_array_equal(views["future"][0, 1:], forward[0, :-1])  # h1->_(t-1)
    np.testing.assert_array_equal(views["past"][0, :-1], backward[0, 1:])  # h1<-_(t+1)
    assert not views["future"][0, 0].any() and not views["past"][0, -1].any()


def test_each_view_sees_what_the_paper_says():
    """Changing word t: forward/backward views at t change, future/past views at t do not."""
    spelling = _word_characters(30)
    encoder = _encoder()
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 30, (1, 7))
    changed = ids.copy()
    t = 3
    changed[0, t] = ids[0, t] % 29 + 1

    def views(token_ids):
        out = encoder(_inputs(token_ids, spelling))
        return {k: keras.ops.convert_to_numpy(v)[0] for k, v in
                auxiliary_views(out["forward_states"], out["backward_states"]).items()}

    before, after = views(ids), views(changed)
    differs = {k: not np.allclose(before[k][t], after[k][t]) for k in AUXILIARY_VIEWS}
    assert differs == {"forward": True, "backward": True, "future": False, "past": False}
    # The forward view at t - 1 sees only the left context, the backward at t + 1 the right.
    assert np.allclose(before["forward"][t - 1], after["forward"][t - 1])
    assert np.allclose(before["backward"][t + 1], after["backward"][t + 1])
    assert not np.allclose(before["future"][t + 1], after["future"][t + 1])
    assert not np.allclose(before["past"][t - 1], after["past"][t - 1])


def _batch(rng, spelling, rows=4, length=7, labels=3):
    ids = rng.integers(1, 30, (rows, length))
    ids[1, 5:] = 0
    return _inputs(ids, spelling), rng.integers(0, labels, (rows, length)).astype("int32")


def test_each_loss_reaches_only_its_modules():
    spelling = _word_characters(30)
    trainer = CrossViewTrainer(_encoder(dropout=0.5), {"a": 3, "b": 2}, hidden_size=8)
    x, y = _batch(np.random.default_rng(0), spelling)

    def reached(losses_fn):
        with tf.GradientTape() as tape:
            total = sum(losses_fn().values())
        grads = tape.gradient(total, trainer.trainable_variables)
        return {v.path.split("/")[0] for v, g in zip(trainer.trainable_variables, grads)
                if g is not None and np.any(keras.ops.convert_to_numpy(g) != 0)}

    supervised = reached(lambda: trainer.supervised_losses(x, y, "a", training=True))
    assert "a_primary" in supervised and not supervised & {
        "b_primary", *(f"{t}_{v}" for t in "ab" for v in AUXILIARY_VIEWS)}
    unlabelled = reached(lambda: trainer.cvt_losses(x))
    # Primary modules frozen (stop_gradient); all eight auxiliary modules learn.
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
    x, y = _batch(rng, spelling)
    u, _ = _batch(rng, spelling)
    labelled = {t: tf.data.Dataset.from_tensors((x, y % n)) for t, n in tasks.items()}
    data = cvt_dataset(labelled, tf.data.Dataset.from_tensors(u))
    trainer.compile(keras.optimizers.SGD(0.1))
    history = trainer.fit(data, steps_per_epoch=2, epochs=1, verbose=0).history
    # L_0, U, L_1, U, ... per step: 2K updates.
    assert int(trainer.optimizer.iterations) == 2 * 2 * len(tasks)
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
        (_inputs(train_ids, spelling), train_tags)).shuffle(64, seed=seed).batch(
        batch, drop_remainder=True)
    unlabelled = tf.data.Dataset.from_tensor_slices(
        _inputs(unlabelled_ids, spelling)).shuffle(2000, seed=seed).batch(
        batch, drop_remainder=True)
    if not use_unlabelled:
        # The same labelled updates, none on unlabelled data.
        trainer.train_step = lambda data: super(CrossViewTrainer, trainer).train_step(
            {"branch": "tags", "inputs": data["labelled"]["tags"][0],
             "labels": data["labelled"]["tags"][1]})
    trainer.compile(keras.optimizers.Adam(2e-3, clipnorm=1.0))
    trainer.fit(cvt_dataset(labelled, unlabelled), steps_per_epoch=steps, epochs=1,
                verbose=0)
    predictions = keras.ops.convert_to_numpy(trainer(_inputs(test_ids, spelling))["tags"])
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
    from keras_ctx.recipes_ulmfit_cvt import read_tagged_tsv

    tagged, untagged = _write_corpus(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert main(["cvt", "--train", tagged, "--unlabelled", untagged, "--out", str(out)]) == 2
    assert (out / "mine.txt").read_text() == "keep me"
    assert "is not empty: choose a new --out" in capsys.readouterr().err
    bad = tmp_path / "bad.tsv"
    bad.write_text("no tab here\n")
    with pytest.raises(ValueError, match="bad.tsv:1: expected token<TAB>tag"):
        read_tagged_tsv(str(bad))


@pytest.mark.slow
def test_cvt_command_trains_and_saves(tmp_path):
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


def test_config_round_trip():
    trainer = CrossViewTrainer(_encoder(), {"a": 3, "b": 2}, hidden_size=8)
    copy = CrossViewTrainer.from_config(trainer.get_config())
    assert copy.tasks == {"a": 3, "b": 2} and copy.hidden_size == 8
    assert copy.count_params() == trainer.count_params()
    with pytest.raises(ValueError, match="label counts"):
        CrossViewTrainer(_encoder(), {"a": 0})
