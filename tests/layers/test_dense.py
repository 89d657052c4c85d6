import keras
import numpy as np
import pytest
import tensorflow as tf

from keras import ops
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import dense
from keras_ctx.backend.xla import in_xla_compilation
from tests.autodiff import value_and_gradients

# The XLA:CPU rewrites (column sums as products with ones, custom weight gradients,
# optimization barriers) are traced by TensorFlow's XLA only.
XLA_CPU = pytest.mark.tensorflow_only("the XLA:CPU rewrites are TensorFlow's "
                                      "(tf.function(jit_compile=True) traces, tf.custom_gradient)")


def _run(fn, *args, jit):
    @tf.function(jit_compile=jit)
    def run(*args):
        return fn(*args), in_xla_compilation()

    result, under_xla = run(*args)
    assert bool(under_xla) == jit  # the path meant is the one exercised
    return tf.nest.map_structure(np.asarray, result)


@XLA_CPU
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("shape", [(16, 8, 5), (2048, 3), (1905, 7), (1, 4)])
def test_column_sum_matches_numpy(jit, shape):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    got = _run(dense.column_sum, tf.constant(x), jit=jit)
    np.testing.assert_allclose(got, x.reshape(-1, shape[-1]).sum(0), rtol=1e-5, atol=1e-4)


@XLA_CPU
def test_column_sum_with_a_row_count_unknown_when_traced():
    # Keras traces with the dataset's spec: the batch is None unless drop_remainder.
    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None, 9, 6])])
    def run(x):
        return dense.column_sum(x)

    for batch in (1, 7, 64):
        x = np.random.default_rng(batch).normal(size=(batch, 9, 6)).astype("float32")
        np.testing.assert_allclose(to_numpy(run(x)), x.reshape(-1, 6).sum(0), rtol=1e-5, atol=1e-4)


def _value_and_gradients(layer, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * tf.cos(y))  # a non-trivial upstream gradient
    return y, tape.gradient(loss, [x] + [v.value for v in layer.trainable_variables])


def _outputs_and_gradients(layer, x, jit):
    """`layer(x)` and the gradients of a non-trivial loss of it with respect to `x` and the
    layer's weights, on any backend (compiled as a step when `jit`)."""
    def loss(x):
        if keras.backend.backend() == "tensorflow":
            assert bool(in_xla_compilation()) == jit  # the path meant is the one exercised
        y = layer(x)
        return ops.sum(y * ops.cos(y)), [y]  # a non-trivial upstream gradient

    _, input_grads, weight_grads, outputs = value_and_gradients(
        loss, [x], layer.trainable_variables, compiled=jit, with_outputs=True)
    return outputs + input_grads + weight_grads


def _compare(ours, theirs, input_shape, jit):
    x = np.random.default_rng(1).normal(size=input_shape).astype("float32")
    ours.build(input_shape)
    theirs.build(input_shape)
    for ours_weight, their_weight in zip(ours.weights, theirs.weights):
        assert ours_weight.path.split("/")[-1] == their_weight.path.split("/")[-1]
        their_weight.assign(np.random.default_rng(2).normal(size=their_weight.shape))
        ours_weight.assign(to_numpy(their_weight))
    want = _outputs_and_gradients(theirs, x, jit)
    got = _outputs_and_gradients(ours, x, jit)
    assert len(got) == len(want) == 2 + len(theirs.trainable_variables)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * np.abs(w).max())


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("input_shape,units", [((4, 6, 32), 8),    # in > out: the transposed path
                                               ((4, 6, 8), 32),    # in < out
                                               ((5, 16), 16)])     # rank 2, square
def test_dense_equals_keras_dense_values_and_gradients(jit, input_shape, units):
    _compare(dense.Dense(units, activation="tanh"),
             keras.layers.Dense(units, activation="tanh"), input_shape, jit)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("equation,output_shape,bias_axes,input_shape", [
    ("btd,dnh->btnh", (None, 4, 8), "nh", (3, 5, 16)),
    ("btnh,nhd->btd", (None, 16), "d", (3, 5, 4, 8)),
    ("btd,de->bte", (None, 8), "e", (3, 5, 16)),  # any other equation: Keras' einsum
])
def test_einsum_dense_equals_keras(jit, equation, output_shape, bias_axes, input_shape):
    _compare(dense.EinsumDense(equation, output_shape, bias_axes=bias_axes),
             keras.layers.EinsumDense(equation, output_shape, bias_axes=bias_axes),
             input_shape, jit)


def test_lora_and_int8_keep_working():
    # Keras quantizes only its own classes unless told; a model's quantize skips
    # others with a warning, which would leave int8 decoding in float32.
    layer = dense.Dense(8)
    layer.build((None, 16))
    x = np.random.default_rng(0).normal(size=(3, 16)).astype("float32")
    before = to_numpy(layer(x))
    layer.enable_lora(rank=2)
    np.testing.assert_allclose(to_numpy(layer(x)), before, atol=1e-6)  # lora_b starts at zero
    assert {v.path.split("/")[-1] for v in layer.trainable_variables} == {"lora_kernel_a",
                                                                         "lora_kernel_b",
                                                                         "bias"}
    quantized = dense.Dense(8)
    quantized.build((None, 16))
    reference = to_numpy(quantized(x))
    quantized.quantize("int8")
    assert quantized.quantization_mode == "int8"
    np.testing.assert_allclose(to_numpy(quantized(x)), reference, atol=0.05 * np.abs(reference).max())
    heads = dense.EinsumDense("btd,dnh->btnh", (None, 2, 4), bias_axes="nh")
    model = keras.Sequential([keras.Input((5, 16)), heads])
    model.quantize("int8")
    assert heads.quantization_mode == "int8"


def test_mixed_precision_gradients_flow_in_the_compute_dtype():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = dense.Dense(4)
        x = np.ones((2, 3, 8), "float32")
        layer.build(x.shape)

        def loss(x):
            y = layer(x)
            assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
            return ops.sum(ops.cast(y, "float32"))

        _, _, grads = value_and_gradients(loss, [x], layer.trainable_variables)
        assert [g.dtype for g in grads] == [np.float32, np.float32]
        np.testing.assert_allclose(grads[1], np.full(4, 6.0))  # 2 x 3 rows of ones
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("jit", [False, True])
def test_position_embedding_gradient_sums_over_the_batch(jit):
    from keras_ctx.layers import PositionEmbedding

    layer = PositionEmbedding(12)
    x = np.zeros((3, 5, 4), "float32")
    layer.build(x.shape)
    upstream = np.random.default_rng(0).normal(size=(3, 5, 4)).astype("float32")

    def loss(x):
        if keras.backend.backend() == "tensorflow":
            assert bool(in_xla_compilation()) == jit  # the path meant is the one exercised
        return ops.sum(ops.multiply(layer(x), upstream))

    _, _, (got,) = value_and_gradients(loss, [x], [layer.position_embeddings], compiled=jit)
    want = np.zeros((12, 4), "float32")
    want[:5] = upstream.sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@XLA_CPU
def test_second_order_gradients_under_xla():
    # A gradient penalty on the weight gradient differentiates the barrier too.
    x = tf.constant(np.random.default_rng(0).normal(size=(6, 8)).astype("float32"))
    kernel = tf.Variable(np.random.default_rng(1).normal(size=(8, 3)).astype("float32"))

    def penalty_gradient(project):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = tf.reduce_sum(project(x, kernel) ** 2)
            penalty = tf.reduce_sum(inner.gradient(loss, kernel) ** 2)
        return outer.gradient(penalty, kernel)

    got = _run(lambda: penalty_gradient(dense.matmul), jit=True)
    want = _run(lambda: penalty_gradient(tf.matmul), jit=True)
    np.testing.assert_allclose(got, want, rtol=1e-4)


# --- The XLA:CPU rewrites apply only to steps compiled for a CPU ------------------------

from keras_ctx.backend.xla import compiled_device_type, compiled_for, cpu_rewrites  # noqa: E402


def _decision(jit, device=None):
    """What `cpu_rewrites` and `compiled_device_type` say inside a traced function."""
    seen = []

    @tf.function(jit_compile=jit)
    def run(x):
        if device is None:
            seen.append((cpu_rewrites(), compiled_device_type()))
        else:
            with tf.device(device):
                seen.append((cpu_rewrites(), compiled_device_type()))
        return x

    run.get_concrete_function(tf.TensorSpec([2]))  # traced only: no GPU needed
    return seen[0]


@XLA_CPU
def test_rewrites_follow_the_device_the_step_is_compiled_for():
    visible = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    assert _decision(jit=True) == (visible == "CPU", visible)
    assert _decision(jit=False)[0] is False  # no XLA, no rewrite
    assert _decision(jit=True, device="/device:CPU:0") == (True, "CPU")
    assert _decision(jit=True, device="/device:GPU:0") == (False, "GPU")  # a scope wins
    for kind in ("GPU", "TPU"):
        with compiled_for(kind):
            assert _decision(jit=True) == (False, kind)
    with compiled_for("CPU"):
        assert _decision(jit=True, device="/device:GPU:0") == (True, "CPU")  # forcing wins
    with pytest.raises(ValueError, match="'CPU', 'GPU' or 'TPU'"):
        with compiled_for("npu"):
            pass


@XLA_CPU
def test_a_strategy_on_a_gpu_turns_the_rewrites_off():
    class FakeExtended:  # a strategy whose replicas are GPUs (none needed to trace)
        worker_devices = ("/job:localhost/replica:0/task:0/device:GPU:0",)

    class FakeStrategy:
        extended = FakeExtended()

    from unittest import mock

    with mock.patch.object(tf.distribute, "has_strategy", return_value=True), \
            mock.patch.object(tf.distribute, "get_strategy", return_value=FakeStrategy()):
        assert _decision(jit=True) == (False, "GPU")


def _op_types(layer, x, jit):
    """The op types of the traced forward + backward pass of `layer` on `x`."""
    fn = tf.function(lambda x: _value_and_gradients(layer, x), jit_compile=jit)
    graph = fn.get_concrete_function(x).graph
    return sorted(op.type for op in graph.get_operations())


@XLA_CPU
@pytest.mark.parametrize("make", [
    lambda module: module.Dense(8, activation="tanh"),
    lambda module: module.EinsumDense("btd,dnh->btnh", (None, 4, 8), bias_axes="nh"),
    lambda module: module.EinsumDense("btnh,nhd->btd", (None, 16), bias_axes="d"),
    lambda module: module.LayerNormalization(epsilon=1e-12),
    lambda module: module.RMSNormalization(epsilon=1e-6),
], ids=["dense", "einsum-split", "einsum-merge", "layer-norm", "rms-norm"])
def test_on_gpu_the_step_is_keras_own_and_on_cpu_it_is_rewritten(make):
    from keras_ctx import layers as ours

    shape = (3, 5, 4, 8) if "nhd" in str(getattr(make(ours), "equation", "")) else (3, 5, 32)
    x = tf.constant(np.random.default_rng(1).normal(size=shape).astype("float32"))
    layer, theirs = make(ours), make(keras.layers)
    layer.build(shape)
    theirs.build(shape)
    for ours_weight, their_weight in zip(layer.weights, theirs.weights):
        their_weight.assign(np.random.default_rng(2).normal(size=their_weight.shape))
        ours_weight.assign(to_numpy(their_weight))
    keras_graph = _op_types(theirs, x, jit=True)
    with compiled_for("GPU"):  # the same graph as Keras' layer: no rewrite at all
        assert _op_types(layer, x, jit=True) == keras_graph
        _compare(make(ours), make(keras.layers), shape, jit=True)  # values and gradients
    with compiled_for("CPU"):
        cpu_graph = _op_types(layer, x, jit=True)
        _compare(make(ours), make(keras.layers), shape, jit=True)
    assert cpu_graph != keras_graph  # the rewrite (products with ones, custom gradients)
    assert "IdentityN" in cpu_graph and "IdentityN" not in keras_graph  # tf.custom_gradient


@XLA_CPU
def test_the_weight_gradient_barrier_only_on_cpu():
    x = tf.constant(np.ones((4, 6, 32), "float32"))
    layer = dense.Dense(8)  # in > out: the transposed product behind a barrier
    layer.build(x.shape)
    with compiled_for("CPU"):
        assert "XlaOptimizationBarrier" in _op_types(layer, x, jit=True)
    with compiled_for("GPU"):
        assert "XlaOptimizationBarrier" not in _op_types(layer, x, jit=True)


@XLA_CPU
def test_position_embedding_sums_over_the_batch_by_product_only_on_cpu():
    from keras_ctx.layers import PositionEmbedding

    x = tf.constant(np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32"))
    layer = PositionEmbedding(16)
    layer.build(x.shape)

    def ops_and_gradient():
        fn = tf.function(lambda x: _value_and_gradients(layer, x)[1][1], jit_compile=True)
        return _op_types(layer, x, jit=True), to_numpy(fn(x))

    with compiled_for("CPU"):
        cpu_ops, cpu_gradient = ops_and_gradient()
    with compiled_for("GPU"):
        gpu_ops, gpu_gradient = ops_and_gradient()
    assert "IdentityN" in cpu_ops and "IdentityN" not in gpu_ops
    np.testing.assert_allclose(cpu_gradient, gpu_gradient, rtol=1e-5, atol=1e-5)
