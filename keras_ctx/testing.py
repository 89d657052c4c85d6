"""One test harness for every keras_ctx layer (and for users' layers built on them).

`run_layer_test` checks, for one layer configuration and one batch of inputs:
  1. config round trip, and that every constructor argument comes back from
     `get_config` unchanged;
  2. eager call, and a symbolic call (keras.Input) giving the same shapes;
  3. use inside a user's functional model between stock Keras layers, saved to a
     `.keras` file and loaded back with identical outputs;
  4. `fit` with `jit_compile=True` (XLA): the loss is finite and weights move;
  5. mixed_bfloat16: outputs in the compute dtype, close to float32 with the same
     weights, and finite.
Inputs are a numpy array (one positional argument), a list (one positional
argument that is a list, as ScalarMix takes) or a dict (keyword arguments).

`run_backbone_test` checks every backbone the same way: config round trip and
attributes, `.keras` save/load, parameter count (analytic = built = expected),
`fit` under XLA, mixed_bfloat16.
"""

import inspect
import os
import tempfile

import keras
import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common import compat


def _flatten(structure):
    return [t for t in keras.tree.flatten(structure) if t is not None]


def _is_float(array):
    return np.issubdtype(np.asarray(array).dtype, np.floating)


def _symbolic_inputs(input_data):
    def make(name, array):
        array = np.asarray(array)
        dtype = "bool" if array.dtype == bool else str(array.dtype)
        return keras.Input(shape=array.shape[1:], dtype=dtype, name=name)

    if isinstance(input_data, dict):
        return {k: make(k, v) for k, v in input_data.items()}
    if isinstance(input_data, (list, tuple)):
        return [make(f"input_{i}", v) for i, v in enumerate(input_data)]
    return make("input", input_data)


def _call(layer, inputs, call_kwargs):
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _assert_config_round_trip(layer_cls, init_kwargs):
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for name, value in init_kwargs.items():
        if isinstance(value, (int, float, str, bool, list, tuple, type(None))):
            got = config.get(name, "<missing>")
            if isinstance(value, tuple):
                got = tuple(got) if isinstance(got, list) else got
            assert got == value, (
                f"get_config()[{name!r}] is {got!r}, constructor got {value!r}"
            )
            assert getattr(layer, name) == value or isinstance(value, tuple), (
                f"constructor argument {name!r} is not kept as an attribute"
            )
    revived = layer_cls.from_config(config)
    assert revived.get_config() == config, "config does not round trip"


def _copy_weights(source, target):
    for s, t in zip(source.weights, target.weights):
        t.assign(keras.ops.cast(s, t.dtype))


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    call_kwargs=None,
    expected_output_shape=None,
    run_training=True,
    run_mixed_precision=True,
    mixed_precision_atol=0.1,
):
    """Runs the shared checks and returns the eager float32 outputs.

    `expected_output_shape` is compared with the shape of the first output.
    """
    call_kwargs = call_kwargs or {}
    _assert_config_round_trip(layer_cls, init_kwargs)

    # Eager call, then a symbolic call: same shapes, batch left free.
    layer = layer_cls(**init_kwargs)
    eager = _call(layer, input_data, call_kwargs)
    eager_flat = [keras.ops.convert_to_numpy(t) for t in _flatten(eager)]
    if expected_output_shape is not None:
        assert eager_flat[0].shape == tuple(expected_output_shape), (
            f"output shape {eager_flat[0].shape} != {expected_output_shape}"
        )
    for array in eager_flat:
        if _is_float(array):
            assert np.all(np.isfinite(array)), "eager output is not finite"

    symbolic_inputs = _symbolic_inputs(input_data)
    symbolic = _call(layer_cls(**init_kwargs), symbolic_inputs, call_kwargs)
    for sym, arr in zip(_flatten(symbolic), eager_flat):
        assert tuple(sym.shape[1:]) == arr.shape[1:], (
            f"symbolic shape {sym.shape} does not match eager shape {arr.shape}"
        )

    # A user's functional model: stock Dense layers before (on float inputs)
    # and after the layer, saved to .keras and loaded back.
    def pre(inputs):
        def dense(t):
            if t.dtype.startswith("float") and len(t.shape) >= 2:
                return keras.layers.Dense(t.shape[-1])(t)
            return t

        return keras.tree.map_structure(dense, inputs)

    user_inputs = _symbolic_inputs(input_data)
    user_layer = layer_cls(**init_kwargs)
    outputs = _flatten(_call(user_layer, pre(user_inputs), call_kwargs))
    floats = [t for t in outputs if t.dtype.startswith("float")]
    # Every float output shaped like the first feeds the head, so that all
    # weights (e.g. of every block of a stack) get gradients.
    same = [t for t in floats if tuple(t.shape) == tuple(floats[0].shape)]
    merged = same[0] if len(same) == 1 else keras.layers.Add()(same)
    head = keras.layers.Dense(2, name="user_head")(merged)
    model = keras.Model(user_inputs, head)
    before = model.predict(input_data, verbose=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    after = loaded.predict(input_data, verbose=0)
    np.testing.assert_allclose(after, before, atol=1e-6, rtol=1e-6)

    if run_training:
        _assert_fit_with_xla(model, user_layer, input_data, head)
    if run_mixed_precision:
        _assert_mixed_precision(
            layer_cls, init_kwargs, input_data, call_kwargs, layer, eager_flat,
            mixed_precision_atol,
        )
    return eager


def _assert_fit_with_xla(model, layer, input_data, head):
    layer_weights = layer.trainable_weights
    initial = [keras.ops.convert_to_numpy(w) for w in layer_weights]
    batch = len(keras.tree.flatten(input_data)[0])
    targets = np.ones((batch,) + tuple(head.shape[1:]), "float32")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
    history = model.fit(input_data, targets, batch_size=batch, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)), f"loss is not finite under XLA: {losses}"
    moved = [
        not np.allclose(keras.ops.convert_to_numpy(w), w0)
        for w, w0 in zip(layer_weights, initial)
    ]
    assert any(moved) or not layer_weights, "fit under XLA did not move any weight"


def _assert_mixed_precision(
    layer_cls, init_kwargs, input_data, call_kwargs, float_layer, float_outputs, atol
):
    mixed = layer_cls(**init_kwargs, dtype="mixed_bfloat16")
    _call(mixed, input_data, call_kwargs)  # build
    _copy_weights(float_layer, mixed)
    for variable in mixed.weights:
        assert variable.dtype == "float32", (
            f"variable {variable.path} is {variable.dtype} under mixed_bfloat16"
        )
    outputs = _flatten(_call(mixed, input_data, call_kwargs))
    for tensor, want in zip(outputs, float_outputs):
        if not _is_float(want):
            continue
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        assert dtype == "bfloat16", (
            f"mixed_bfloat16 output dtype is {dtype}, expected bfloat16"
        )
        got = keras.ops.convert_to_numpy(keras.ops.cast(tensor, "float32"))
        assert np.all(np.isfinite(got)), "mixed_bfloat16 output is not finite"
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, atol=atol * scale, rtol=0)


# ------------------------------------------------------------------ pretrainers
#
# `run_pretrainer_test` checks one objective the way `run_layer_test` checks a
# layer: one SGD step's weight update (-lr * gradient) in float32 on one
# device is the reference, and the same step must give the same update
#   - under MirroredStrategy over the logical CPUs of this process (same
#     global batch): a step that forgets to divide by num_replicas_in_sync
#     moves the weights N times as far;
#   - under mixed_float16 (Keras wraps the optimizer in a LossScaleOptimizer):
#     a step that skips `optimizer.scale_loss` moves them ~2^-15 as far;
#   - under mixed_bfloat16, and with jit_compile=True;
# and a NaN in the weights must show in the `loss` metric, which is what
# `keras_ctx.training.fit_resumable`'s divergence guard reads.

PRETRAINER_CHECKS = ("mirrored", "mixed_float16", "mixed_bfloat16", "xla", "nan")


def use_logical_cpus(count=2):
    """Splits the CPU into `count` logical devices; call before TensorFlow runs anything."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])


class _StepProbe(keras.callbacks.Callback):
    """Sets (or records) the trainable weights just before the first step; records after."""

    def __init__(self, initial):
        super().__init__()
        self.initial, self.before = initial, None

    def on_train_batch_begin(self, batch, logs=None):
        if self.before is not None:
            return
        variables = self.model.trainable_variables
        if self.initial is not None:
            shapes = [tuple(v.shape) for v in variables]
            assert shapes == [w.shape for w in self.initial], (
                "the pretrainer's trainable variables differ between two builds")
            for variable, value in zip(variables, self.initial):
                variable.assign(value)
        self.before = [np.array(keras.ops.convert_to_numpy(v), "float64") for v in variables]


def pretrainer_step(make_pretrainer, batch, dtype_policy="float32", jit_compile=False,
                    strategy=None, initial=None, learning_rate=0.1, nan_step=False,
                    initial_loss_scale=None):
    """One SGD step of `make_pretrainer()` on `batch`.

    Args:
        make_pretrainer: builds the model (called under `strategy.scope()` and
            with `dtype_policy` as the global policy).
        batch: one global batch (a dict, or a tuple (x, y[, sample_weight])).
        initial: trainable weights to start from (float64 arrays), e.g. the
            `initial` of an earlier call, so that every variant starts equal.
        nan_step: after the step, set every trainable weight to NaN and take
            one more step: its `loss` is returned as `nan_loss`.
        initial_loss_scale: under mixed_float16, start Keras' dynamic loss
            scale here instead of at 2^15 (the optimizer is wrapped in a
            LossScaleOptimizer either way).

    Returns:
        dict with `initial` (weights before the step), `update` (all weights'
        change, flat float64), `loss` (the step's `loss` metric) and `nan_loss`.
    """
    strategy = strategy or tf.distribute.get_strategy()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    try:
        with strategy.scope():
            model = make_pretrainer()
            optimizer = keras.optimizers.SGD(learning_rate)
            if initial_loss_scale and dtype_policy == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(
                    optimizer, initial_scale=initial_loss_scale)
            model.compile(optimizer=optimizer, jit_compile=jit_compile)
    finally:
        keras.config.set_dtype_policy(previous)
    data = tf.data.Dataset.from_tensors(batch)
    # Build every weight before the first step (as fit does under a strategy),
    # so that the probe sees them all.
    with strategy.scope():
        compat.resolve("symbolic_build")(model, data_batch=batch if isinstance(batch, tuple) else (batch,))
    probe = _StepProbe(initial)
    history = model.fit(data, epochs=1, verbose=0, callbacks=[probe], shuffle=False)
    after = [np.array(keras.ops.convert_to_numpy(v), "float64")
             for v in model.trainable_variables]
    update = np.concatenate([(a - b).ravel() for a, b in zip(after, probe.before)])
    result = {"initial": probe.before, "update": update,
              "loss": float(history.history["loss"][0]), "nan_loss": None}
    if isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
        # Halved from its start: the gradients overflowed and the step was skipped.
        result["loss_scale"] = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
    if nan_step:
        for variable in model.trainable_variables:
            variable.assign(np.full(variable.shape, np.nan, "float32"))
        logs = model.fit(data, epochs=1, verbose=0, shuffle=False).history
        result["nan_loss"] = float(logs["loss"][0])
    return result


_STRATEGIES = []


def mirrored_cpu_strategy():
    """A MirroredStrategy over this process's first two logical CPUs (one per process).

    A second MirroredStrategy in the same process makes the first one's
    collectives fail, so every check shares this one.
    """
    if not _STRATEGIES:
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(devices) < 2:
            raise ValueError("The mirrored check needs two logical CPU devices: call "
                             "keras_ctx.testing.use_logical_cpus(2) before TensorFlow starts.")
        _STRATEGIES.append(tf.distribute.MirroredStrategy(devices[:2]))
    return _STRATEGIES[0]


def _compare(update, reference):
    size = np.linalg.norm(reference)
    return {"ratio": float(np.linalg.norm(update) / size),
            "error": float(np.linalg.norm(update - reference) / size)}


def measure_pretrainer(make_pretrainer, make_batch, checks=PRETRAINER_CHECKS,
                       learning_rate=0.1, initial_loss_scale=None, jit_compile=False):
    """The numbers `run_pretrainer_test` asserts on, per check.

    `jit_compile` is the reference's and the variants' (the "xla" check's is True):
    "auto" is Keras' choice per backend (JAX compiles the step, the cheaper path there).

    Returns:
        {"loss": float32 loss, check: {"ratio": |update| / |float32 update|,
        "error": |update - float32 update| / |float32 update|}, "nan": loss
        after NaN weights}. "mirrored" needs several logical devices (see
        `use_logical_cpus`); the reference then runs on the first one.
    """
    batch = make_batch()
    unknown = set(checks) - set(PRETRAINER_CHECKS)
    if unknown:
        raise ValueError(f"Unknown checks {sorted(unknown)}; choose from {PRETRAINER_CHECKS}.")
    keras.utils.set_random_seed(0)
    reference = pretrainer_step(make_pretrainer, batch, nan_step="nan" in checks,
                                learning_rate=learning_rate, jit_compile=jit_compile)
    out = {"loss": reference["loss"]}
    if "nan" in checks:
        out["nan"] = reference["nan_loss"]
    variants = {"mixed_float16": dict(dtype_policy="mixed_float16",
                                      initial_loss_scale=initial_loss_scale,
                                      jit_compile=jit_compile),
                "mixed_bfloat16": dict(dtype_policy="mixed_bfloat16", jit_compile=jit_compile),
                "xla": dict(jit_compile=True)}
    if "mirrored" in checks:
        variants["mirrored"] = dict(strategy=mirrored_cpu_strategy(), jit_compile=jit_compile)
    for check in checks:
        if check in variants:
            keras.utils.set_random_seed(0)
            step = pretrainer_step(make_pretrainer, batch, initial=reference["initial"],
                                   learning_rate=learning_rate, **variants[check])
            out[check] = dict(_compare(step["update"], reference["update"]), loss=step["loss"])
            if "loss_scale" in step:
                out[check]["loss_scale"] = step["loss_scale"]
    return out


# Largest relative update error per check: float32 reorderings (replicas, XLA
# fusion) measure <= 2e-6 on the tiny models of tests/pretraining; half
# precision rounds activations to 2^-11 (float16: ~1e-3 measured) or 2^-8
# (bfloat16: up to ~2e-2 measured) relative.
PRETRAINER_TOLERANCES = {"mirrored": 1e-4, "xla": 1e-4, "mixed_float16": 0.01,
                         "mixed_bfloat16": 0.05}


def assert_pretrainer_measures(measures, tolerances=None):
    """Asserts the numbers of `measure_pretrainer` (see PRETRAINER_TOLERANCES)."""
    tolerances = dict(PRETRAINER_TOLERANCES, **(tolerances or {}))
    assert np.isfinite(measures["loss"]), f"the float32 loss is {measures['loss']}"
    for check, tolerance in tolerances.items():
        if check not in measures:
            continue
        got = measures[check]
        skipped = (f"; the LossScaleOptimizer skipped the step (gradients overflowed; "
                   f"scale now {got['loss_scale']:g})" if got.get("loss_scale", 1) < 2**15
                   and got["ratio"] == 0 else "")
        assert got["error"] < tolerance, (
            f"{check}: the update is {got['ratio']:.4g} x the float32 one-device update "
            f"(relative error {got['error']:.3g} >= {tolerance}){skipped}")
    if "nan" in measures:
        assert not np.isfinite(measures["nan"]), (
            f"NaN weights gave a finite loss metric ({measures['nan']}): the divergence "
            "guard of keras_ctx.training cannot see it")


def run_pretrainer_test(make_pretrainer, make_batch, checks=PRETRAINER_CHECKS,
                        tolerances=None, learning_rate=0.1, initial_loss_scale=None,
                        jit_compile=False):
    """Runs `measure_pretrainer` and asserts it; returns the measures.

    Example:
    >>> run_pretrainer_test(lambda: CausalLMPretrainer(GPTBackbone(...)),
    ...                     lambda: {"token_ids": ids, "padding_mask": mask},
    ...                     checks=("mixed_float16", "xla", "nan"))
    """
    measures = measure_pretrainer(make_pretrainer, make_batch, checks, learning_rate,
                                  initial_loss_scale, jit_compile)
    assert_pretrainer_measures(measures, tolerances)
    return measures


def run_backbone_test(backbone_cls, init_kwargs, input_data, expected_parameter_count=None,
                      run_training=True, run_mixed_precision=True, mixed_precision_atol=0.1):
    """The checks every backbone passes, for one config and one batch of inputs.

    1. config round trip: `get_config` returns every constructor argument,
       each is an attribute of the same name, `from_config` rebuilds it;
    2. outputs: finite `sequence_output`-like floats for the batch;
    3. `.keras` save and load: identical outputs;
    4. parameter count: `analytic_parameter_count(**config)` (when the family
       has one) and `expected_parameter_count` equal the built count;
    5. `fit` under XLA through a small head: finite loss, the backbone moves;
    6. mixed_bfloat16: float32 variables, bfloat16 outputs close to float32.

    `input_data` is the backbone's input dict (numpy). Returns the float32 outputs.
    """
    backbone = backbone_cls(**init_kwargs)
    config = backbone.get_config()
    for name, value in init_kwargs.items():
        assert config.get(name, "<missing>") == value, (
            f"get_config()[{name!r}] is {config.get(name, '<missing>')!r}, not {value!r}")
        assert getattr(backbone, name, "<missing>") == value, (
            f"constructor argument {name!r} is not kept as an attribute")
    # A written-out get_config must not forget an argument the test did not pass.
    for name, parameter in inspect.signature(backbone_cls.__init__).parameters.items():
        if name in ("self", "dtype") or parameter.kind is parameter.VAR_KEYWORD:
            continue
        if parameter.default is not None and name not in config:
            raise AssertionError(f"get_config() lacks the constructor argument {name!r}")
        if name in config:
            assert getattr(backbone, name, "<missing>") == config[name], (
                f"constructor argument {name!r} is not kept as an attribute")
    revived = backbone_cls.from_config(config)
    assert revived.get_config() == config, "config does not round trip"

    outputs = backbone(input_data)
    names = [n for n, t in outputs.items() if not isinstance(t, (list, tuple))
             and _is_float(keras.ops.convert_to_numpy(t))]
    assert names, "the backbone returns no float output"
    eager = {n: keras.ops.convert_to_numpy(outputs[n]) for n in names}
    for name, array in eager.items():
        assert np.all(np.isfinite(array)), f"{name} is not finite"

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "backbone.keras")
        backbone.save(path)
        loaded = keras.saving.load_model(path, compile=False)
    assert type(loaded) is backbone_cls, f"loaded a {type(loaded).__name__}"
    again = loaded(input_data)
    for name in names:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(again[name]), eager[name],
                                   atol=1e-6, rtol=1e-6)

    count = backbone.count_params()
    analytic = getattr(backbone_cls, "analytic_parameter_count", None)
    if analytic is not None:
        from keras_ctx.models.presets import count_parameters

        assert count_parameters(backbone_cls, config) == count, (
            f"analytic parameter count {count_parameters(backbone_cls, config)} != built {count}")
    if expected_parameter_count is not None:
        assert count == expected_parameter_count, (
            f"{count} parameters, expected {expected_parameter_count}")

    if run_training:
        inputs = {name: keras.Input(np.asarray(v).shape[1:], dtype=str(np.asarray(v).dtype),
                                    name=name) for name, v in input_data.items()}
        features = backbone(inputs)
        # A (batch, time, hidden) output: dict order differs by backend (torch sorts keys).
        sequence = next(n for n in names if len(eager[n].shape) == 3)
        pooled = keras.layers.GlobalAveragePooling1D()(features[sequence])
        head = keras.layers.Dense(2, name="head")(pooled)
        _assert_fit_with_xla(keras.Model(inputs, head), backbone, input_data, head)

    if run_mixed_precision:
        mixed = backbone_cls(**init_kwargs, dtype="mixed_bfloat16")
        mixed(input_data)
        _copy_weights(backbone, mixed)
        for variable in mixed.weights:
            assert variable.dtype == "float32", (
                f"variable {variable.path} is {variable.dtype} under mixed_bfloat16")
        got = mixed(input_data)
        for name in names:
            want = eager[name] if not run_training else keras.ops.convert_to_numpy(
                backbone(input_data)[name])
            value = keras.ops.convert_to_numpy(keras.ops.cast(got[name], "float32"))
            dtype = keras.backend.standardize_dtype(got[name].dtype)
            assert dtype == "bfloat16", f"{name} is {dtype} under mixed_bfloat16"
            assert np.all(np.isfinite(value)), f"{name} is not finite under mixed_bfloat16"
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(value, want, atol=mixed_precision_atol * scale, rtol=0)
    return eager

