"""ULMFiT's transfer pieces against the paper's formulas and hand-computed updates."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.schedules import SlantedTriangular
from keras_ctx.tasks.heads import ConcatPooling
from keras_ctx.tasks.transfer import (
    ConcatPoolClassifier,
    GradualUnfreezing,
    discriminative_multipliers,
    layer_groups,
    layer_wise_decay_multipliers,
    with_layer_learning_rates,
)


def paper_stlr(t, T, eta_max, cut_frac=0.1, ratio=32):
    """Howard & Ruder 2018, Eq. 3, written out."""
    cut = math.floor(T * cut_frac)
    p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
    return eta_max * (1 + p * (ratio - 1)) / ratio


@pytest.mark.parametrize("T", [1000, 37])
def test_stlr_matches_the_paper_point_by_point(T):
    schedule = SlantedTriangular(0.01, total_steps=T)
    got = keras.ops.convert_to_numpy(schedule(np.arange(T + 1)))
    want = np.array([paper_stlr(t, T, 0.01) for t in range(T + 1)])
    # With T * cut_frac not an integer (T = 37) the formula's p turns negative
    # before T (the rate would too): the schedule holds p at 0 there.
    negative = want < 0.01 / 32
    assert negative.any() == (T == 37)
    np.testing.assert_allclose(got[~negative], want[~negative], rtol=1e-5, atol=0)
    np.testing.assert_allclose(got[negative], 0.01 / 32, rtol=1e-6)
    cut = math.floor(T * 0.1)
    assert got[0] == pytest.approx(0.01 / 32) and got[cut] == pytest.approx(0.01)
    assert np.all(np.diff(got[:cut + 1]) > 0) and np.all(np.diff(got[cut:]) <= 0)


def test_stlr_drives_an_optimizer_and_rejects_a_run_too_short():
    adam = keras.optimizers.Adam(SlantedTriangular(0.01, total_steps=100))
    variable = keras.Variable(np.zeros(3, "float32"))
    for t in range(12):
        assert float(adam.learning_rate) == pytest.approx(paper_stlr(t, 100, 0.01), rel=1e-5)
        adam.apply([keras.ops.ones(3)], [variable])
    with pytest.raises(ValueError, match="no increasing phase"):
        SlantedTriangular(0.01, total_steps=5)


def test_multiplier_tables():
    np.testing.assert_allclose(discriminative_multipliers(4), [2.6**-3, 2.6**-2, 1 / 2.6, 1])
    # ELECTRA (Clark et al. 2020): lr * decay^(L + 2 - depth), head at depth L + 2.
    np.testing.assert_allclose(layer_wise_decay_multipliers(2, 0.8), [0.8**4, 0.8**3, 0.8**2, 1])


def _adam_updates(make_optimizer, gradients, steps=3, initial=(1.0, -2.0)):
    """The update of two one-variable 'layers' after `steps` applies of fixed gradients."""
    layers = [keras.Variable(np.full(4, w, "float32")) for w in initial]
    optimizer = make_optimizer(layers)
    for _ in range(steps):
        optimizer.apply([keras.ops.convert_to_tensor(g, "float32") for g in gradients], layers)
    return [keras.ops.convert_to_numpy(v) - w for v, w in zip(layers, initial)]


def test_scaling_gradients_is_not_a_learning_rate_under_adam_but_scaling_updates_is():
    gradients = [np.array([0.3, -0.1, 0.2, 0.05]), np.array([-0.4, 0.2, 0.1, 0.3])]
    base = _adam_updates(lambda layers: keras.optimizers.Adam(0.01), gradients)
    # Scaling layer 0's gradient by 1/2.6 leaves Adam's step (m / sqrt(v)) unchanged.
    scaled = _adam_updates(lambda layers: keras.optimizers.Adam(0.01),
                           [gradients[0] / 2.6, gradients[1]])
    np.testing.assert_allclose(scaled[0], base[0], rtol=1e-4)
    # The per-layer learning rate scales layer 0's update by exactly 1/2.6.
    per_layer = _adam_updates(
        lambda layers: with_layer_learning_rates(
            keras.optimizers.Adam(0.01), [[layers[0]], [layers[1]]],
            discriminative_multipliers(2)), gradients)
    np.testing.assert_allclose(per_layer[0], base[0] / 2.6, rtol=1e-5)
    np.testing.assert_allclose(per_layer[1], base[1], rtol=1e-6)


def test_per_layer_rates_scale_decoupled_weight_decay_too():
    zero = [np.zeros(4), np.zeros(4)]  # Adam's part is 0: only the decay moves weights
    updates = _adam_updates(
        lambda layers: with_layer_learning_rates(
            keras.optimizers.AdamW(0.01, weight_decay=0.1), [[layers[0]], [layers[1]]],
            [0.25, 1.0]), zero, steps=1)
    np.testing.assert_allclose(updates[0], -0.25 * 0.01 * 0.1 * 1.0, atol=1e-7)
    np.testing.assert_allclose(updates[1], -1.0 * 0.01 * 0.1 * -2.0, atol=1e-7)


def test_a_variable_in_two_groups_or_a_missing_factor_raises():
    v = keras.Variable(np.zeros(2, "float32"))
    with pytest.raises(ValueError, match="two layer groups"):
        with_layer_learning_rates(keras.optimizers.Adam(), [[v], [v]], [0.5, 1.0])
    with pytest.raises(ValueError, match="one per group"):
        with_layer_learning_rates(keras.optimizers.Adam(), [[v]], [0.5, 1.0])


def test_concat_pooling_over_real_tokens_matches_numpy():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(2, 5, 3)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "int32")
    h[1, 2:] = 100.0  # padding must not reach the max or the mean
    got = keras.ops.convert_to_numpy(ConcatPooling()(h, mask))
    for row, n in enumerate([5, 2]):
        real = h[row, :n]
        want = np.concatenate([real[-1], real.max(0), real.mean(0)])
        np.testing.assert_allclose(got[row], want, rtol=1e-6)


def _tiny_awd(vocabulary_size=30, num_layers=3):
    from keras_ctx.models import AwdLstmBackbone

    return AwdLstmBackbone(vocabulary_size, embedding_size=8, hidden_size=12,
                           num_layers=num_layers, lstm_implementation="loop")


def _classification_data(rows=8, length=6, vocabulary_size=30):
    rng = np.random.default_rng(0)
    ids = rng.integers(1, vocabulary_size, (rows, length)).astype("int32")
    return ({"token_ids": ids, "padding_mask": np.ones_like(ids)},
            rng.integers(0, 2, rows).astype("int32"))


def test_layer_groups_cover_every_trainable_weight_once():
    from keras_ctx.models import BertBackbone, GPTBackbone

    classifier = ConcatPoolClassifier(_tiny_awd(), 2)
    groups = layer_groups(classifier)
    assert len(groups) == 5  # embedding, 3 LSTMs, head (ULMFiT's groups)
    flat = [id(v) for g in groups for v in g]
    assert sorted(flat) == sorted(id(v) for v in classifier.trainable_weights)
    bert = BertBackbone(vocabulary_size=30, num_layers=3, num_heads=2, hidden_size=8,
                        intermediate_size=16, max_sequence_length=8)
    gpt = GPTBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_size=8,
                      intermediate_size=16, max_sequence_length=8)
    from keras_ctx.models import XLNetBackbone

    xlnet = XLNetBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_size=8,
                          intermediate_size=16)
    for backbone, layers in ((bert, 3), (gpt, 2), (xlnet, 2)):
        groups = layer_groups(backbone)
        assert len(groups) == layers + 1
        assert sorted(id(v) for g in groups for v in g) == sorted(
            id(v) for v in backbone.trainable_weights)
    names = [v.path for v in layer_groups(bert)[0]]
    assert any("token_embedding" in n for n in names) and any("pooler" in v.path for v in
                                                               layer_groups(bert)[-1])


class _Watch(keras.callbacks.Callback):
    """Which groups' weights changed in each epoch."""

    def __init__(self, groups):
        super().__init__()
        self.groups, self.changed = groups, []

    def _values(self):
        return [[keras.ops.convert_to_numpy(v).copy() for v in g] for g in self.groups]

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self._values()

    def on_epoch_end(self, epoch, logs=None):
        self.changed.append([
            any(not np.array_equal(a, b) for a, b in zip(before, after))
            for before, after in zip(self.start, self._values())])


def test_gradual_unfreezing_follows_the_schedule():
    classifier = ConcatPoolClassifier(_tiny_awd(num_layers=2), 2)
    groups = layer_groups(classifier)
    x, y = _classification_data()
    # ULMFiT's three together: discriminative rates, STLR, gradual unfreezing.
    optimizer = with_layer_learning_rates(
        keras.optimizers.Adam(SlantedTriangular(0.01, total_steps=20), beta_1=0.7,
                              beta_2=0.99),
        groups, discriminative_multipliers(len(groups)))
    assert type(optimizer).__name__ == "LayerRateAdam"
    classifier.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    watch = _Watch(groups)
    unfreezing = GradualUnfreezing(groups)
    # The unfreezing callback first, so that the watch sees the epoch's state.
    classifier.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[unfreezing, watch])
    assert unfreezing.history == [1, 2, 3, 4, 4]
    G = len(groups)
    want = [[g >= G - min(e + 1, G) for g in range(G)] for e in range(5)]
    assert watch.changed == want
    assert float(optimizer.learning_rate) == pytest.approx(paper_stlr(5, 20, 0.01), rel=1e-5)


def test_unfreezing_refuses_an_optimizer_built_without_the_frozen_layers():
    classifier = ConcatPoolClassifier(_tiny_awd(), 2)
    groups = layer_groups(classifier)
    for v in groups[0]:
        v.trainable = False
    x, y = _classification_data()
    optimizer = keras.optimizers.Adam(1e-2)
    optimizer.build(classifier.trainable_variables)
    classifier.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="make the whole model trainable"):
        classifier.fit(x, y, epochs=1, verbose=0, callbacks=[GradualUnfreezing(groups)])


# ---------------------------------------------------------------- the effect

def synthetic_topics(seed, vocabulary_size=402, topics=2, length=12, topical=0.5):
    """Documents whose class is their topic, told apart by which words co-occur.

    Ids 2..: half of the words are shared fillers, the rest split between the
    topics. A document draws each word from its topic's words with probability
    `topical`, else from the fillers. Few labelled documents mention few of a
    topic's 100 words; unlabelled text shows which words appear together.
    """
    rng = np.random.default_rng(seed)
    words = rng.permutation(np.arange(2, vocabulary_size))
    fillers, topical_words = words[:len(words) // 2], words[len(words) // 2:]
    by_topic = np.array_split(topical_words, topics)

    def documents(count):
        labels = rng.integers(0, topics, count)
        topical_draw = rng.random((count, length)) < topical
        ids = np.where(topical_draw,
                       np.stack([rng.choice(by_topic[k], length) for k in labels]),
                       rng.choice(fillers, (count, length)))
        return ({"token_ids": ids.astype("int32"),
                 "padding_mask": np.ones_like(ids, "int32")}, labels.astype("int32"))

    return documents


def _ulmfit_vs_scratch(seed, labelled_rows=24, unlabelled_rows=3000, lm_epochs=4):
    from keras_ctx.models import AwdLstmBackbone
    from keras_ctx.tasks.ulmfit import (
        fine_tune_classifier,
        fine_tune_language_model,
        pretrain_language_model,
    )

    documents = synthetic_topics(seed)
    unlabelled, _ = documents(unlabelled_rows)
    train = documents(labelled_rows)
    test_x, test_y = documents(1000)

    def backbone():
        # ULMFiT's dropouts scaled by 0.5 for a model this small (fastai's drop_mult).
        return AwdLstmBackbone(402, embedding_size=32, hidden_size=64, num_layers=2,
                               embedding_dropout=0.025, input_dropout=0.2, hidden_dropout=0.15,
                               weight_dropout=0.25, output_dropout=0.2)

    def accuracy(classifier):
        logits = classifier.predict(test_x, batch_size=500, verbose=0)
        return float((logits.argmax(-1) == test_y).mean())

    labelled = tf.data.Dataset.from_tensor_slices(train).shuffle(64, seed=seed).batch(8)
    keras.utils.set_random_seed(seed)
    # From scratch: every layer trains from the start, for 3x the epochs.
    scratch, _ = fine_tune_classifier(backbone(), labelled, 2, epochs=36,
                                      gradual_unfreezing=False, verbose=0)
    keras.utils.set_random_seed(seed)
    text = tf.data.Dataset.from_tensor_slices(unlabelled).shuffle(3000, seed=seed).batch(
        32, drop_remainder=True)
    # Stage 1 (here on the same unlabelled text: no general corpus in a test),
    # then stage 2 with discriminative rates and STLR.
    lm = pretrain_language_model(backbone(), text, epochs=lm_epochs, learning_rate=3e-3,
                                 verbose=0)
    lm = fine_tune_language_model(lm, text, epochs=1, verbose=0)
    ulmfit, _ = fine_tune_classifier(lm.backbone, labelled, 2, epochs=12, verbose=0)
    return accuracy(scratch), accuracy(ulmfit)


@pytest.mark.slow
def test_target_lm_fine_tuning_and_unfreezing_beat_training_from_scratch():
    results = [_ulmfit_vs_scratch(seed) for seed in (0, 1, 2)]
    scratch, ulmfit = np.array(results).T
    print(f"accuracy from scratch {scratch.mean():.3f} {scratch.tolist()}; "
          f"ULMFiT (target LM + unfreezing) {ulmfit.mean():.3f} {ulmfit.tolist()}")
    assert ulmfit.mean() > scratch.mean() + 0.1


def test_layer_wise_decay_fits_a_transformer_classifier_groups():
    from keras_ctx.models import BertBackbone
    from keras_ctx.tasks import SequenceClassifier

    bert = BertBackbone(vocabulary_size=30, num_layers=3, num_heads=2, hidden_size=8,
                        intermediate_size=16, max_sequence_length=8)
    groups = layer_groups(SequenceClassifier(bert, 2))
    factors = layer_wise_decay_multipliers(3, 0.8)
    assert len(groups) == len(factors) == 5
    optimizer = with_layer_learning_rates(keras.optimizers.AdamW(1e-3), groups, factors)
    top, embeddings = groups[-2][0], groups[0][0]
    assert optimizer.learning_rate_multiplier(top) == pytest.approx(0.8**2)
    assert optimizer.learning_rate_multiplier(embeddings) == pytest.approx(0.8**5)


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_ulmfit_command_refuses_a_used_out_directory(tmp_path, capsys):
    from keras_ctx.cli import main

    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    text = _write(tmp_path / "t.txt", "a b c\n")
    train = _write(tmp_path / "l.tsv", "a b\tx\nb c\ty\n")
    code = main(["ulmfit", "--text", text, "--train", train, "--out", str(out)])
    assert code == 2 and (out / "mine.txt").read_text() == "keep me"
    assert "is not empty: choose a new --out" in capsys.readouterr().err
    # Too few classifier steps for STLR: refused before any training.
    code = main(["ulmfit", "--text", text, "--train", train, "--out", str(tmp_path / "new")])
    assert code == 2 and "no increasing phase" in capsys.readouterr().err


@pytest.mark.slow
def test_ulmfit_command_trains_and_saves(tmp_path):
    import json

    from keras_ctx.cli import main

    documents = synthetic_topics(0)
    (x, y) = documents(200)
    lines = [" ".join(f"w{i}" for i in row) for row in x["token_ids"]]
    text = _write(tmp_path / "t.txt", "\n".join(lines) + "\n")
    train = _write(tmp_path / "l.tsv", "".join(f"{l}\t{'ab'[k]}\n" for l, k in
                                               zip(lines[:16], y[:16])))
    out = tmp_path / "out"
    assert main(["ulmfit", "--text", text, "--train", train, "--out", str(out),
                 "--directions", "forward",
                 "--batch-size", "4", "--sequence-length", "12", "--set", "embedding_size=8",
                 "--set", "hidden_size=8", "--set", "num_layers=1"]) == 0
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    assert vocabulary["classes"] == ["a", "b"]
    classifier = keras.saving.load_model(out / "classifier.keras")
    assert classifier.output_shape == (None, 2)


def test_sequence_classifier_concat_pooling_is_the_awd_lstm_family_default():
    from keras_ctx.tasks import SequenceClassifier

    backbone = _tiny_awd(num_layers=1)
    classifier = SequenceClassifier(backbone, 2)
    assert classifier.get_config()["pooling"] == "concat"
    x, _ = _classification_data(rows=2)
    x["padding_mask"][1, 3:] = 0
    pooled = keras.Model(classifier.input, classifier.get_layer("pool").output)(x)
    h = keras.ops.convert_to_numpy(backbone(x)["sequence_output"])
    want = np.concatenate([h[1, 2], h[1, :3].max(0), h[1, :3].mean(0)])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pooled)[1], want, rtol=1e-5)


def test_ulmfit_recipe_trains_its_language_model_on_one_continuous_stream():
    from keras_ctx.commands.ulmfit import _lm_dataset
    from keras_ctx.tasks.ulmfit import fine_tune_language_model, pretrain_language_model
    from keras_ctx.models import AwdLstmBackbone

    # Words w0 .. w99 in order over several lines: id of w_k is k + 2.
    words = [f"w{k}" for k in range(100)]
    texts = [" ".join(words[i:i + 7]) for i in range(0, 100, 7)]
    index = {w: k + 2 for k, w in enumerate(words)}
    stream = _lm_dataset([t.split() for t in texts], index, 6, 4)
    # batchify without lost targets: 4 contiguous parts of 25 words sharing their ends
    # (99 targets, the last part one short); each batch continues every part.
    rows = [[] for _ in range(4)]
    for x, y, w in stream.batches():
        for i in range(4):
            rows[i] += y[i][w[i] > 0].tolist()
    np.testing.assert_array_equal(np.concatenate(rows), np.arange(1, 100) + 2)
    assert [len(r) for r in rows] == [25, 25, 25, 24]

    backbone = AwdLstmBackbone(102, embedding_size=8, hidden_size=16, num_layers=1,
                               lstm_implementation="loop")
    lm = pretrain_language_model(backbone, stream, verbose=0)
    assert lm.carry_state and lm.batch_size == 4
    # After the epoch the state is where each row stopped (not reset by evaluation).
    assert np.abs(keras.ops.convert_to_numpy(lm.state)).max() > 1e-3
    lm.output_bias.assign(np.full(102, 0.5, "float32"))
    tuned = fine_tune_language_model(lm, stream, epochs=3, verbose=0)
    assert tuned is lm  # same stream batch: the stage-1 LM goes on
    plain = tf.data.Dataset.from_tensor_slices(
        {"token_ids": np.arange(96, dtype="int32").reshape(24, 4) + 2,
         "padding_mask": np.ones((24, 4), "int32")}).batch(4)
    fresh = fine_tune_language_model(lm, plain, epochs=3, verbose=0)
    assert not fresh.carry_state and fresh.backbone is backbone
    assert np.all(keras.ops.convert_to_numpy(fresh.output_bias) != 0)  # bias kept
