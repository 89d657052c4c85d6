"""`keras_ctx.common.errors.one_line`: the reason itself, whatever TensorFlow and Keras wrap
around it (tf.function's "in user code:", Keras' shape inference, tf.data's map)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.common.errors import one_line

REASON = "token_ids has 3 rows; give 4 (the reason)"


def _raises(kind):
    def function(x):
        if x.shape[-1] == 3:
            raise kind(REASON)
        return x

    return function


def _caught(call):
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("kind", [ValueError, KeyError, TypeError])
def test_the_reason_behind_tf_functions_in_user_code_is_the_line(kind):
    error = _caught(lambda: tf.function(_raises(kind))(tf.zeros([2, 3])))
    assert str(error).startswith("in user code:")  # what TensorFlow says first
    assert one_line(error) == REASON


@pytest.mark.tensorflow_only("a Keras layer's call inside a tf.function")
@pytest.mark.parametrize("kind", [ValueError, KeyError])
@pytest.mark.parametrize("infers_shape", [True, False])
def test_the_reason_of_a_layer_inside_tf_function_is_the_line(kind, infers_shape):
    class Refusing(keras.layers.Layer):
        def call(self, x):
            return _raises(kind)(x)

        if not infers_shape:
            def compute_output_shape(self, shape):
                return shape

    model = keras.Sequential([Refusing()])
    error = _caught(lambda: tf.function(lambda x: model(x))(tf.zeros([2, 3])))
    assert one_line(error) == REASON


def test_the_reason_of_a_tf_data_map_is_the_line():
    error = _caught(lambda: tf.data.Dataset.range(3).map(
        lambda x: _raises(ValueError)(tf.zeros([3]))))
    assert one_line(error) == REASON


def test_a_key_error_outside_a_graph_is_its_message():
    assert one_line(KeyError(REASON)) == REASON


def test_keras_call_wrappers_and_ansi_codes_are_removed():
    from keras_ctx.common.errors import one_line

    class Refuses(keras.layers.Layer):
        def call(self, x):
            raise ValueError("the real problem; the fix")

    with pytest.raises(ValueError) as error:
        Refuses()(np.ones((1, 2)))
    assert one_line(error.value) == "the real problem; the fix"
    assert one_line(ValueError("\x1b[1mbold\x1b[0m message\nmore")) == "bold message"
