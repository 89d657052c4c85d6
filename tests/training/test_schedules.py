"""Every shipped learning-rate schedule saves and reloads with its model's optimizer."""

import keras
import numpy as np
import pytest

from keras_ctx import schedules
from keras_ctx.commands import pretrain
from keras_ctx.pretraining.cvt import cvt_optimizer


def _rates(schedule, steps):
    return np.array([float(schedule(step)) for step in steps])


def test_warmup_then_decay_hand_computed():
    # 100 steps: warm-up over 10 (eta (t+1)/10), then linear to 0 over 90.
    schedule = pretrain.optimizer(1e-3, 100)._learning_rate
    assert isinstance(schedule, schedules.WarmupThenDecay)
    want = [1e-4, 5e-4, 1e-3, 1e-3 * (1 - 1 / 90), 1e-3 * 0.5, 0.0, 0.0]
    np.testing.assert_allclose(_rates(schedule, [0, 4, 9, 11, 55, 100, 150]), want,
                               rtol=1e-5, atol=1e-12)


def _optimizers():
    return {
        "pretrain_adamw": lambda: pretrain.optimizer(1e-3, 40),
        "warmup_then_decay": lambda: keras.optimizers.Adam(
            schedules.WarmupThenDecay(1e-2, 3, 7, end_learning_rate=1e-4)),
        "slanted_triangular": lambda: keras.optimizers.Adam(
            schedules.SlantedTriangular(0.01, total_steps=50)),
        "scaled": lambda: keras.optimizers.Adam(
            schedules.ScaledLearningRate(schedules.SlantedTriangular(0.01, 50))),
        "cvt": lambda: cvt_optimizer(warm_up_steps=4, ema_decay=None),
        "xlm_inverse_sqrt": lambda: keras.optimizers.Adam(
            schedules.InverseSqrtWithWarmup(1e-2, 3)),
    }


@pytest.mark.parametrize("name", sorted(_optimizers()))
def test_compiled_model_saves_and_reloads_with_its_schedule(name, tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(_optimizers()[name](), loss="mse")
    x, y = np.random.rand(8, 3).astype("float32"), np.random.rand(8, 2).astype("float32")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)  # 4 updates: optimizer state exists
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    before, after = model.optimizer._learning_rate, reloaded.optimizer._learning_rate
    assert type(after) is type(before)
    assert after.get_config() == before.get_config()
    steps = [0, 1, 3, 7, 20, 60]
    np.testing.assert_allclose(_rates(after, steps), _rates(before, steps), rtol=1e-6)
    assert int(reloaded.optimizer.iterations) == 4
    # The same next update from the same state.
    model.train_on_batch(x[:4], y[:4])
    reloaded.train_on_batch(x[:4], y[:4])
    for a, b in zip(model.get_weights(), reloaded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
