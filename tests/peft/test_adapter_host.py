"""Adapters go into any block that hosts them (`AdapterHost`), found by that contract,
not by a list of keras_ctx's block classes: a block of the user's own included."""

import keras
import numpy as np

from keras_ctx import peft
from keras_ctx.layers import AdapterHost
from keras_ctx.layers.adapters import add_and_norm


class ResidualBlock(AdapterHost, keras.layers.Layer):
    """norm(x + W x): a user's block that routes its residual through add_and_norm."""

    def __init__(self, width, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.dense = keras.layers.Dense(width, name="dense")
        self.norm = keras.layers.LayerNormalization(name="norm")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.norm.build(input_shape)

    def adapter_width(self):
        return self.width

    def call(self, x, training=None):
        return add_and_norm(self, "feedforward", x, self.dense(x), self.norm, training=training)


def test_a_users_block_that_hosts_adapters_gets_them_and_they_change_its_output():
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, ResidualBlock(8, name="b1")(ResidualBlock(8, name="b0")(inputs)))
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    before = keras.ops.convert_to_numpy(model(x))
    assert [b.name for b in peft.transformer_blocks(model)] == ["b0", "b1"]
    peft.add_adapter(model, "task", "pfeiffer", reduction_factor=2)
    # Near-identity at insertion (Houlsby et al. 2019, 3.1): the output barely moves...
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), before, atol=1e-2)
    adapters = [w for w in model.trainable_weights if "task" in w.path]
    assert len(adapters) == 8  # down and up projections (kernel, bias) in each block
    rng = np.random.default_rng(1)
    for weight in adapters:  # (not a constant shift: the block's norm would remove it)
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    # ...and the adapters' weights are on its path.
    assert np.abs(keras.ops.convert_to_numpy(model(x)) - before).max() > 0.1
