"""AWD-LSTM: the published model's size, its three dropouts, and its LM objective."""

import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import EmbeddingDropout, LockedDropout, WeightDropLSTM
from keras_ctx.models import AwdLstmBackbone
from keras_ctx.pretraining.awd_lstm import AwdLstmLMPretrainer
from tests.autodiff import no_gradient, value_and_gradients
from tests.execution import FEW_STEPS, GRADIENTS


def published_wt103_parameters():
    """ULMFiT's WT-103 AWD-LSTM in PyTorch (fastai), counted by hand.

    Embedding 60,000 x 400 (tied to the decoder), decoder bias 60,000, and
    three nn.LSTM layers 400 -> 1150 -> 1150 -> 400, each with W_ih (4h x in),
    W_hh (4h x h) and two biases b_ih, b_hh (4h each).
    """
    vocabulary, sizes = 60000, [400, 1150, 1150, 400]
    lstm = sum(4 * h * i + 4 * h * h + 2 * 4 * h for i, h in zip(sizes, sizes[1:]))
    return vocabulary * 400 + vocabulary + lstm


def test_parameter_count_matches_the_published_model():
    assert published_wt103_parameters() == 44_271_600
    # Keras' LSTM has one bias (PyTorch's b_ih + b_hh summed): 4h fewer per layer.
    redundant_biases = 4 * (1150 + 1150 + 400)
    lm = AwdLstmLMPretrainer(AwdLstmBackbone.from_preset("awd-lstm-wt103"))
    trainable = sum(int(np.prod(w.shape)) for w in lm.trainable_weights)
    assert trainable == published_wt103_parameters() - redundant_biases
    analytic = AwdLstmBackbone.analytic_parameter_count(60000)
    assert lm.backbone.count_params() == analytic == 44_200_800


def test_analytic_count_matches_a_build():
    backbone = AwdLstmBackbone(50, embedding_size=6, hidden_size=10, num_layers=2)
    assert backbone.count_params() == AwdLstmBackbone.analytic_parameter_count(50, 6, 10, 2)


def _padded_lm_inputs(rows=3, length=7, vocabulary=40, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocabulary, (rows, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 4:] = 0
    ids[mask == 0] = 0
    return {"token_ids": ids, "padding_mask": mask}


def test_backbone_outputs_and_inference_is_deterministic():
    backbone = AwdLstmBackbone(40, embedding_size=6, hidden_size=10, num_layers=3)
    inputs = _padded_lm_inputs()
    out = backbone(inputs)
    assert out["sequence_output"].shape == (3, 7, 6)
    assert [tuple(h.shape) for h in out["hidden_states"]] == [
        (3, 7, 6), (3, 7, 10), (3, 7, 10), (3, 7, 6)]
    again = to_numpy(backbone(inputs)["sequence_output"])
    np.testing.assert_array_equal(to_numpy(out["sequence_output"]), again)
    trained = to_numpy(backbone(inputs, training=True)["sequence_output"])
    assert not np.allclose(trained, again)
    assert np.all(to_numpy(out["sequence_output"])[1, 4:] == 0)


def test_locked_dropout_shares_one_mask_over_time():
    x = np.ones((64, 10, 16), "float32")
    y = to_numpy(LockedDropout(0.3, seed=1)(x, training=True))
    assert np.all(y == y[:, :1])  # the same at every step
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((y[:, 0] == 0).mean() - 0.3) < 0.05
    np.testing.assert_array_equal(to_numpy(LockedDropout(0.3)(x)), x)


def test_embedding_dropout_drops_word_types_everywhere():
    ids = np.tile(np.arange(1, 21, dtype="int32"), (8, 3))  # each word 24 times
    x = np.ones(ids.shape + (4,), "float32")
    y = to_numpy(EmbeddingDropout(21, 0.5, seed=3)(x, ids, training=True))
    for word in range(1, 21):
        values = y[ids == word]
        assert np.all(values == values[0])  # dropped or kept as a whole
    kept = np.array([y[ids == w][0, 0] for w in range(1, 21)])
    assert np.all(np.isin(kept, [0.0, 2.0])) and 0 < (kept == 0).sum() < 20


def test_weight_drop_reaches_only_the_recurrent_weights():
    layer = WeightDropLSTM(8, weight_dropout=0.5, implementation="loop", seed=4)
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32")
    plain = to_numpy(layer(x))
    dropped = to_numpy(layer(x, training=True))
    # Step 0 has h_(-1) = 0: the recurrent weights, dropped or not, play no part.
    np.testing.assert_allclose(dropped[:, 0], plain[:, 0], rtol=1e-6)
    assert not np.allclose(dropped[:, 1:], plain[:, 1:])
    # An LSTMP with the same weights gives the inference output.
    from keras_ctx.layers import LSTMP

    reference = LSTMP(8, implementation="loop")
    reference.build(x.shape)
    reference.set_weights(layer.get_weights())
    np.testing.assert_allclose(to_numpy(reference(x)), plain, rtol=1e-6)
    config = layer.get_config()
    assert config["weight_dropout"] == 0.5
    assert WeightDropLSTM.from_config(config).weight_dropout == 0.5


def test_lm_losses_ar_tar_and_the_loss_falls():
    backbone = AwdLstmBackbone(40, embedding_size=8, hidden_size=16, num_layers=2,
                               lstm_implementation="loop")
    lm = AwdLstmLMPretrainer(backbone)
    inputs = _padded_lm_inputs(rows=4, length=8)
    losses = lm.compute_losses(inputs, training=True)
    assert set(losses) == {"lm", "ar", "tar"}
    assert float(losses["lm"]) == pytest.approx(np.log(40), rel=0.1)
    assert set(lm.compute_losses(inputs, training=False)) == {"lm"}
    # TAR by hand on the undropped output (real consecutive pairs only).
    h = to_numpy(backbone(inputs)["sequence_output"])
    mask = inputs["padding_mask"].astype("float32")
    pairs = mask[:, 1:] * mask[:, :-1]
    want = (((h[:, 1:] - h[:, :-1]) ** 2).mean(-1) * pairs).sum() / pairs.sum()
    no_dropout = AwdLstmLMPretrainer(AwdLstmBackbone(
        40, embedding_size=8, hidden_size=16, num_layers=2, embedding_dropout=0.0,
        input_dropout=0.0, hidden_dropout=0.0, weight_dropout=0.0, output_dropout=0.0))
    no_dropout.backbone.set_weights(backbone.get_weights())
    got = no_dropout.compute_losses(inputs, training=True)["tar"]
    assert float(got) == pytest.approx(want, rel=1e-5)
    no_dropout.compile(keras.optimizers.Adam(3e-2, beta_1=0.7, beta_2=0.99))
    history = no_dropout.fit(inputs, epochs=15, verbose=0).history
    assert history["lm_loss"][-1] < history["lm_loss"][0] - 0.5


@pytest.mark.slow
def test_lm_pretrainer_matrix():
    # 24 s on 2 cores; the lead adds the case to tests/pretraining/matrix_cases.py.
    from keras_ctx.testing import run_pretrainer_test

    def make():
        return AwdLstmLMPretrainer(AwdLstmBackbone(
            40, embedding_size=8, hidden_size=16, num_layers=2, embedding_dropout=0.0,
            input_dropout=0.0, hidden_dropout=0.0, weight_dropout=0.0, output_dropout=0.0,
            lstm_implementation="loop"))

    run_pretrainer_test(make, lambda: _padded_lm_inputs(rows=4, length=8),
                        checks=("mixed_float16", "mixed_bfloat16", "xla", "nan"))


def test_config_round_trips():
    backbone = AwdLstmBackbone(40, embedding_size=6, hidden_size=10, num_layers=2)
    again = AwdLstmBackbone.from_config(backbone.get_config())
    assert again.count_params() == backbone.count_params()
    lm = AwdLstmLMPretrainer(backbone, activation_regularization=1.5)
    copy = AwdLstmLMPretrainer.from_config(lm.get_config())
    assert copy.activation_regularization == 1.5 and copy.output_dropout == 0.4


# -- truncated BPTT: the LSTM state carried over a continuous stream --------------

def _tiny_lm(carry_state=True, batch_size=3):
    backbone = AwdLstmBackbone(
        50, embedding_size=8, hidden_size=16, num_layers=2, embedding_dropout=0.0,
        input_dropout=0.0, hidden_dropout=0.0, weight_dropout=0.0, output_dropout=0.0,
        lstm_implementation="loop")
    return AwdLstmLMPretrainer(backbone, batch_size=batch_size, carry_state=carry_state)


def _stream_ids(rows=3, length=10):
    ids = np.random.default_rng(0).integers(2, 50, (rows, length)).astype("int32")
    return ids, {"token_ids": ids, "padding_mask": np.ones_like(ids)}


def test_carrying_the_state_over_two_halves_equals_one_pass_over_the_whole():
    lm = _tiny_lm()
    ids, whole = _stream_ids()
    want = to_numpy(lm(whole))  # zero state, one pass
    first = {k: v[:, :4] for k, v in whole.items()}
    second = {k: v[:, 4:] for k, v in whole.items()}
    lm.compute_losses(first, training=True)  # a training step moves the state on
    carried = lm.backbone.forward_pass(second, lm._carried_states(3))["sequence_output"]
    fresh = lm.backbone.forward_pass(second)["sequence_output"]
    got = to_numpy(lm.logits(carried))
    np.testing.assert_allclose(got, want[:, 4:], atol=1e-5)
    # The carried state matters: from zeros the second half differs.
    assert np.abs(to_numpy(lm.logits(fresh)) - want[:, 4:]).max() > 1e-3
    # The plain call is unchanged: forward without states is the functional graph.
    np.testing.assert_allclose(
        to_numpy(lm.logits(lm.backbone.forward_pass(whole)["sequence_output"])),
        want, atol=1e-6)


def test_no_gradient_reaches_the_carried_state_and_evaluation_starts_from_zero():
    lm = _tiny_lm()
    _, batch = _stream_ids()
    lm.compute_losses(batch, training=True)
    before = to_numpy(lm.state)
    assert np.abs(before).max() > 1e-3
    assert any(w is lm.state for w in lm.non_trainable_weights)
    assert not any(w is lm.state for w in lm.trainable_weights)

    def loss():
        return sum(lm.compute_losses(batch, training=True).values())

    _, _, grads = value_and_gradients(loss, (), [lm.state]
                                      + list(lm.backbone.lstms[0].trainable_weights),
                                      compiled=GRADIENTS)
    assert no_gradient(grads[0])
    assert all(not no_gradient(g) for g in grads[1:])
    # Evaluation neither reads nor moves the state; reset_state zeroes it.
    after_train = to_numpy(lm.state)
    lm.compute_losses(batch, training=False)
    np.testing.assert_array_equal(to_numpy(lm.state), after_train)
    lm.reset_state()
    assert not np.any(to_numpy(lm.state))


def test_carrying_the_state_needs_the_batch_size_and_checks_it():
    with pytest.raises(ValueError, match="batch_size"):
        _tiny_lm(batch_size=None)
    lm = _tiny_lm(batch_size=4)
    _, batch = _stream_ids(rows=3)
    with pytest.raises(ValueError, match="batch_size=4"):
        lm.compute_losses(batch, training=True)
    config = lm.get_config()
    assert config["carry_state"] is True and config["batch_size"] == 4
    revived = AwdLstmLMPretrainer.from_config(config)
    assert revived.carry_state and tuple(revived.state.shape) == (4, 2 * (16 + 8))
    # The backbone's saved config is untouched by the new option.
    assert "carry_state" not in lm.backbone.get_config()


# -- the training stream: batchify without lost targets, variable-length BPTT ------

def test_every_token_after_the_first_is_a_target_exactly_once_per_epoch():
    from keras_ctx.data.lm_stream import BpttStream

    corpus = np.arange(2, 105)  # 103 distinct ids: N - 1 = 102 targets, B = 4 leaves 2 over
    stream = BpttStream(corpus, batch_size=4, bptt=6, seed=3)
    for _ in range(2):  # two epochs, different length draws
        targets, rows = [], [[] for _ in range(4)]
        lengths = []
        for x, y, w in stream.batches():
            assert x["token_ids"].shape[1] % 8 == 0  # padded to the XLA bucket
            real = w > 0
            # Each target is the token after its input, in the corpus.
            np.testing.assert_array_equal(y[real], x["token_ids"][real] + 1)
            np.testing.assert_array_equal(to_numpy(x["padding_mask"][real]), 1)
            targets += y[real].tolist()
            length = int(x["padding_mask"].sum(1).max())
            lengths.append(length)
            np.testing.assert_allclose(to_numpy(x["learning_rate_scale"]), length / 6)
            for i in range(4):
                rows[i] += x["token_ids"][i][x["padding_mask"][i] > 0].tolist()
        assert sorted(targets) == list(range(3, 105))
        # Row i is one contiguous piece of the corpus, continued batch after batch.
        for i, row in enumerate(rows):
            np.testing.assert_array_equal(row, np.arange(len(row)) + row[0])
        assert rows[0][0] == 2 and all(rows[i + 1][0] == rows[i][-1] + 1 for i in range(3))
        assert len(set(lengths)) > 1  # drawn, not fixed


@pytest.mark.tensorflow_only("counts the targets fit reads through tf.py_function in a "
                              "tf.data map")
def test_fit_sees_every_target_once_per_epoch_without_running_out_of_data(capsys):
    import warnings

    import tensorflow as tf

    from keras_ctx.data.lm_stream import BpttStream
    from keras_ctx.pretraining.awd_lstm import StateReset

    corpus = np.random.default_rng(1).integers(2, 50, 400)
    stream = BpttStream(corpus, batch_size=3, bptt=12, seed=0)
    seen, epochs = [], []

    def record(x, y, w):
        def keep(y, w):
            seen.append(to_numpy(y)[to_numpy(w) > 0])
            return 0
        tf.py_function(keep, [y, w], tf.int32)
        return x, y, w

    class Epochs(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epochs.append(np.concatenate(seen))
            seen.clear()

    lm = _tiny_lm(batch_size=3)
    lm.compile(keras.optimizers.Adam(1e-3), **FEW_STEPS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = lm.fit(stream.dataset().map(record), epochs=2, verbose=2,
                         callbacks=[StateReset(), Epochs()])
    out = capsys.readouterr()
    noise = [str(w.message) for w in caught] + [out.out, out.err]
    assert not [text for text in noise if "ran out of data" in text]
    assert len(history.history["loss"]) == 2
    for targets in epochs:  # the corpus after its first token, each once
        np.testing.assert_array_equal(np.sort(targets), np.sort(corpus[1:]))
    # Each epoch draws its own lengths from (seed, epoch), K segments each time.
    first, second = stream.epoch_lengths(0), stream.epoch_lengths(1)
    assert len(first) == len(second) == stream.steps_per_epoch
    assert first != second and first == BpttStream(corpus, 3, 12, seed=0).epoch_lengths(0)


def test_segment_lengths_follow_merity_et_al():
    from keras_ctx.data.lm_stream import segment_lengths

    rng = np.random.default_rng(0)
    lengths = np.array(segment_lengths(rng, 2_000_000, 70))
    assert lengths.sum() == 2_000_000 and lengths.min() >= 5
    lengths = lengths[:-1]  # the last one is cut to what is left
    half = lengths < 52  # bptt / 2 = 35 +- 5 sigma vs 70 +- 5 sigma: well apart
    assert abs(half.mean() - 0.05) < 0.005
    # int() truncates N(mean, 5) towards zero: mean - 0.5 on average.
    assert lengths[~half].mean() == pytest.approx(69.5, abs=0.1)
    assert lengths[half].mean() == pytest.approx(34.5, abs=0.3)
    assert lengths[~half].std() == pytest.approx(5.0, abs=0.1)
    fixed = segment_lengths(rng, 20, 6, variable_length=False)
    assert fixed == [6, 6, 6, 2]


def _stream_batch(scale, rows=2, length=8):
    ids = np.random.default_rng(0).integers(2, 50, (rows, length + 1)).astype("int32")
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((rows, length), "int32"),
         "learning_rate_scale": np.full((rows,), scale, "float32")}
    return x, ids[:, 1:], np.ones((rows, length), "float32")


def _first_update(scale, optimizer):
    keras.utils.set_random_seed(0)
    lm = _tiny_lm(carry_state=False)
    lm.compile(optimizer, **FEW_STEPS)
    before = [to_numpy(w) for w in lm.trainable_weights]
    lm.train_on_batch(*_stream_batch(scale))
    return [to_numpy(w) - b for w, b in zip(lm.trainable_weights, before)]


def test_variable_length_rescales_the_learning_rate_of_that_update_under_adam():
    from keras_ctx.schedules import ScaledLearningRate, SlantedTriangular
    from keras_ctx.tasks.transfer import with_layer_learning_rates

    # Adam's first update is lr * g / (|g| + eps'): the scale multiplies it exactly
    # (scaling the gradient or the loss instead would change nothing).
    def first_update(scale):
        return np.concatenate([s.ravel() for s in _first_update(
            scale, keras.optimizers.Adam(0.01, epsilon=1e-10))])

    plain = first_update(1.0)
    assert np.abs(plain).max() == pytest.approx(0.01, rel=1e-4)
    for scale in (0.5, 1.3):
        np.testing.assert_allclose(to_numpy(first_update(scale)), scale * plain, rtol=1e-4, atol=1e-9)
    # With STLR and ULMFiT's per-layer rates: the product of all three.
    lm = _tiny_lm(carry_state=False)
    groups = [lm.backbone.layer_groups()[0], [w for g in lm.backbone.layer_groups()[1:]
                                              for w in g] + [lm.output_bias]]
    adam = with_layer_learning_rates(
        keras.optimizers.Adam(SlantedTriangular(0.01, 100), epsilon=1e-10), groups, [0.25, 1])
    keras.utils.set_random_seed(0)
    lm.compile(adam, **FEW_STEPS)
    assert isinstance(lm.optimizer._learning_rate, ScaledLearningRate)
    embedding = to_numpy(groups[0][0])
    lm.train_on_batch(*_stream_batch(0.8))
    step = np.abs(to_numpy(groups[0][0]) - embedding)
    stlr_0 = 0.01 / 32  # STLR at t = 0: eta_max / ratio
    assert step.max() == pytest.approx(stlr_0 * 0.25 * 0.8, rel=1e-3)
    # A batch without a scale trains at the plain rate again.
    lm.train_on_batch({"token_ids": _stream_batch(1)[0]["token_ids"],
                       "padding_mask": np.ones((2, 8), "int32")})
    assert float(lm.learning_rate_scale) == 1.0


def _fit_stream(jit_compile, epochs):
    from keras_ctx.data.lm_stream import BpttStream
    from keras_ctx.pretraining.awd_lstm import StateReset

    corpus = np.random.default_rng(0).integers(2, 50, 400)
    stream = BpttStream(corpus, batch_size=3, bptt=12, seed=0)
    lm = _tiny_lm(batch_size=3)
    lm.compile(keras.optimizers.Adam(1e-3), jit_compile=jit_compile)
    lm.fit(stream.dataset(), epochs=epochs, callbacks=[StateReset()], verbose=0)
    return lm, stream


@pytest.mark.slow
def test_the_stream_trains_with_a_carried_state_under_xla():
    # 48 s on 2 cores: one XLA program per length bucket (8, 16, 24 steps).
    lm, _ = _fit_stream(jit_compile=True, epochs=2)
    assert np.abs(to_numpy(lm.state)).max() > 1e-3


def test_the_stream_trains_with_a_carried_state():
    # "auto": a TF graph on a CPU (XLA is the slow test above), jax.jit on JAX.
    lm, stream = _fit_stream(jit_compile="auto", epochs=1)
    assert np.abs(to_numpy(lm.state)).max() > 1e-3
    assert 0 < float(lm.learning_rate_scale) < 2
    assert stream.expected_steps(2) == pytest.approx(2 * 133 / 11.7, rel=0.15)
