"""Every private upstream API keras_ctx uses resolves in the installed releases."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_ctx.common import compat


PACKAGE = Path(__file__).parents[2] / "keras_ctx"
# What keras_ctx/backend/tensorflow.py alone reads: Keras' TensorFlow trainer and optimizer
# define them, its JAX and PyTorch ones do not (nor need to).
TENSORFLOW_STEP = ("maybe_symbolic_build", "distribution_strategy", "model_strategy",
                   "data_adapter")


def _table_keys(table):
    reason = "read by keras_ctx/backend/tensorflow.py only, on Keras' TensorFlow trainer"
    return [pytest.param(key, marks=pytest.mark.tensorflow_only(reason))
            if key in TENSORFLOW_STEP else key for key in sorted(table)]


@pytest.mark.backend_neutral("reads keras_ctx's sources")
def test_the_tensorflow_step_alone_reads_its_private_names():
    readers = {key: sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                           if path.name != "compat.py" and f'"{key}"' in path.read_text())
               for key in TENSORFLOW_STEP}
    assert readers == {key: ["backend/tensorflow.py"] for key in TENSORFLOW_STEP}


@pytest.mark.parametrize("key", _table_keys(compat.SYMBOLS))
def test_every_private_upstream_symbol_resolves(key):
    # On an upgrade that drops one, this fails with compat's own message:
    # the symbol, the version it was written for and the installed one.
    assert compat.resolve(key) is not None


def test_the_pins_named_are_the_constraints_files():
    constraints = (Path(__file__).parents[2] / "constraints.txt").read_text().splitlines()
    for distribution, version in compat.WRITTEN_FOR.items():
        assert f"{distribution}=={version}" in constraints, distribution


def test_a_missing_symbol_names_itself_and_the_pinned_version(monkeypatch):
    monkeypatch.setitem(compat.SYMBOLS, "gone", ("tensorflow", "tensorflow.python.ops.nowhere",
                                                  "Function"))
    with pytest.raises(compat.UpstreamAPIError) as error:
        compat.resolve("gone")
    message = str(error.value)
    assert "`tensorflow.python.ops.nowhere.Function`" in message
    assert "written for tensorflow 2.21.0" in message
    assert "Install tensorflow==2.21.0 (constraints.txt's pin)" in message
    monkeypatch.setitem(compat.SYMBOLS, "gone too", ("keras", "keras", "Layer._no_such_method"))
    with pytest.raises(compat.UpstreamAPIError, match=r"`keras.Layer._no_such_method`.*keras 3.15.1"):
        compat.resolve("gone too")


def test_wrappers_behave_as_upstream():
    import keras

    byte_values, characters = compat.bytes_to_unicode()
    assert dict(zip(byte_values, characters))[b" "] == "Ġ"  # GPT-2's space marker
    inner = keras.layers.Dense(2)
    model = keras.Sequential([keras.Input((3,)), inner])
    assert inner in compat.flatten_layers(model, include_self=False)
    assert model not in compat.flatten_layers(model, include_self=False)


def _instances():
    """One live upstream object per private attribute keras_ctx reads off instances."""
    import keras
    import numpy as np
    from keras.src.trainers.epoch_iterator import EpochIterator

    dense = keras.layers.Dense(2)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, dense(inputs))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return {"tracker": dense, "own_trainable_variables": dense,
            "own_non_trainable_variables": dense, "optimizer_variables": model.optimizer,
            "learning_rate": model.optimizer, "distribution_strategy": model.optimizer,
            "keras_history": model.outputs[0], "inbound_nodes": dense,
            "data_adapter": EpochIterator(x=np.zeros((4, 3)), batch_size=2),
            "model_strategy": model, "variable_value": dense.kernel}


def test_every_private_attribute_has_a_live_object_here():
    assert set(_instances()) == set(compat.ATTRIBUTES), "give each ATTRIBUTES key an object"


@pytest.mark.parametrize("key", _table_keys(compat.ATTRIBUTES))
def test_every_private_upstream_attribute_is_read_from_a_live_object(key):
    # UpstreamAPIError naming it if an upgrade dropped it.
    compat.attribute(_instances()[key], key)


def test_a_missing_attribute_names_itself_and_the_pinned_version(monkeypatch):
    monkeypatch.setitem(compat.ATTRIBUTES, "gone", ("keras", "keras.layers.Layer", "_no_such"))
    with pytest.raises(compat.UpstreamAPIError,
                       match=r"`keras.layers.Layer._no_such`, written for keras 3.15.1"):
        compat.attribute(object(), "gone")


def test_attribute_wrappers_behave_as_upstream():
    import keras
    import numpy as np
    import tensorflow as tf

    instances = _instances()
    dense = instances["tracker"]
    with compat.unlocked(dense):
        dense.extra = keras.layers.Dense(1)  # a built layer refuses new sublayers when locked
    assert dense.extra in compat.flatten_layers(dense, include_self=False)
    with pytest.raises(ValueError):
        dense.another = keras.layers.Dense(1)
    model = instances["model_strategy"]
    assert [id(v) for v in compat.own_variables(dense)] == [id(dense.kernel), id(dense.bias)]
    assert compat.own_variables(model) == []  # all of them belong to its Dense
    assert compat.producer(model.outputs[0]) is dense
    optimizer = model.optimizer
    keys = {compat.variable_key(optimizer, v) for v in compat.attribute(optimizer,
                                                                        "optimizer_variables")}
    assert keys == {compat.variable_key(optimizer, v) for v in model.trainable_variables}

    class Own(keras.optimizers.AdamW):  # a user's override is the one called
        def _use_weight_decay(self, variable):
            return "kernel" in variable.path

    own = Own(weight_decay=0.1)
    assert compat.bound(own, "use_weight_decay")(dense.kernel)
    assert not compat.bound(own, "use_weight_decay")(dense.bias)
    dataset = tf.data.Dataset.from_tensor_slices(np.zeros((4, 3), "float32")).batch(2)
    from keras.src.trainers.epoch_iterator import EpochIterator

    assert compat.tf_dataset_of(EpochIterator(x=dataset).data_adapter) is dataset
    assert compat.tf_dataset_of(instances["data_adapter"].data_adapter) is None


# --- nothing private outside compat.py --------------------------------------------------

PRIVATE_MODULES = ("keras.src", "tensorflow.python", "tensorflow.compiler", "keras_hub.src")


def _upstream_private_names():
    """Private names (one underscore) on live Keras objects of the kinds keras_ctx extends."""
    import keras
    import numpy as np

    inputs = keras.Input((3,))
    dense = keras.layers.Dense(2)
    model = keras.Model(inputs, dense(inputs))
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.zeros((2, 3)), np.zeros((2, 2)), verbose=0)
    objects = [model, dense, model.optimizer, model.outputs[0], dense.kernel, inputs,
               keras.layers.LSTMCell(2), keras.layers.Embedding(3, 2), keras.callbacks.Callback(),
               keras.losses.MeanSquaredError(), keras.metrics.Mean(),
               keras.optimizers.schedules.ExponentialDecay(1.0, 1, 0.5)]
    names = set()
    for obj in objects:
        names |= {n for n in list(getattr(obj, "__dict__", {})) + dir(type(obj))
                  if n.startswith("_") and not n.startswith("__")}
    return names


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "compat.py":
            yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_private_upstream_apis_are_used_only_through_compat():
    upstream = _upstream_private_names()
    ours = set()  # private names keras_ctx defines itself (may coincide with upstream ones)
    for _, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
    fenced = {attribute.rpartition(".")[2] for _, _, attribute in compat.SYMBOLS.values()}
    found = []
    for path, tree in _sources():
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [node.module or ""])
                found += [f"{where}:{node.lineno} imports {m}" for m in modules
                          if m.startswith(PRIVATE_MODULES)]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                  and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                  and node.args[1].value in upstream and node.args[1].value not in ours):
                found.append(f"{where}:{node.lineno} reads Keras' private "
                             f"{node.args[1].value!r} by name")
            elif isinstance(node, ast.Attribute) and node.attr == "__internal__":
                found.append(f"{where}:{node.lineno} reads tf.__internal__")
            elif (isinstance(node, ast.Attribute) and node.attr in upstream
                  and node.attr not in ours):
                found.append(f"{where}:{node.lineno} reads Keras' private .{node.attr}")
    found += _private_overrides(fenced)
    assert not found, "private upstream APIs outside keras_ctx/common/compat.py: " + "; ".join(found)


def _private_overrides(fenced):
    """Methods of keras_ctx classes that override a private method of an upstream base."""
    import importlib
    import inspect

    found = []
    for path, _ in _sources():
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = importlib.import_module(module.removesuffix(".__init__"))
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            upstream = [base for base in cls.__mro__[1:]
                        if base.__module__.split(".")[0] in ("keras", "tensorflow", "keras_hub")]
            for name in vars(cls):
                if (name.startswith("_") and not name.startswith("__") and name not in fenced
                        and any(name in vars(base) for base in upstream)):
                    found.append(f"{module.__name__}.{cls.__name__}.{name} overrides a private "
                                 "upstream method (name it in compat.SYMBOLS)")
    return found


# One fit and one evaluate of a tiny BERT pretrainer under MirroredStrategy (two logical
# CPUs), built beforehand through public APIs (a symbolic call, optimizer.build): the
# passes its generator makes.
_MIRRORED_PASSES = """
from keras_ctx import testing
testing.use_logical_cpus(2)
import keras, tensorflow as tf
from keras_ctx.backend import build_from_spec
from tests.pretraining.matrix_cases import CASES
make, make_batch = CASES["bert"]
batch, passes = make_batch(), []
def rows():
    passes.append(1)
    yield from (batch, batch)
data = tf.data.Dataset.from_generator(rows, output_signature={
    k: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for k, v in batch.items()})
with testing.mirrored_cpu_strategy().scope():
    model = make()
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    build_from_spec(model, data.element_spec)
    model.optimizer.build(model.trainable_variables)
model.fit(data, epochs=1, verbose=0)
after_fit = len(passes)
model.evaluate(data, verbose=0)
print("PASSES", after_fit, len(passes))
"""


@pytest.mark.tensorflow_only("tf.distribute.MirroredStrategy over logical CPUs")
@pytest.mark.slow  # a TensorFlow process with two logical CPUs (~25 s on 2 cores)
def test_why_the_tensorflow_step_keeps_maybe_symbolic_build():
    """Under a tf.distribute strategy Keras' TensorFlow fit and evaluate read a batch off a
    pass of their own before the epoch, whether the model is built or not: without the
    override (backend/tensorflow.py) this fit made 2 passes and evaluate 2 more, though the
    model and its optimizer were built first (the data's first pass, another shuffle or a
    generator's next epoch, never trained); under MultiWorkerMirroredStrategy Keras' merge
    of that batch fails (tests/pretraining/test_multi_worker.py)."""
    root = str(Path(__file__).parents[2])
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _MIRRORED_PASSES], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "PASSES 1 2"
