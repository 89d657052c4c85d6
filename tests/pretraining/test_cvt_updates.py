"""CVT's updates against cvt_text's train ops: a weight the update's loss does not reach stays put.

cvt_text (tensorflow/models research/cvt_text, model/multitask_model.py `_get_train_op`)
makes one train op per task and one for the unlabelled loss, each
`MomentumOptimizer.apply_gradients(clip_by_global_norm(compute_gradients(loss), 1.0))`:
a weight whose gradient is None (another task's primary module, the auxiliary modules
on labelled data, the primary modules on unlabelled data: their targets are fed as
numbers) keeps its value and its momentum slot. The reference below is that rule in
NumPy (TF1's momentum: accumulation = m * accumulation + g; w -= lr * accumulation,
which is Keras' velocity form under a constant learning rate).
"""

import json
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.models.cvt import AUXILIARY_VIEWS, CvtEncoder
from keras_ctx.pretraining.cvt import CrossViewTrainer, CvtSGD, cvt_optimizer
from tests.autodiff import value_and_gradients
from tests.execution import GRADIENTS

LR, MOMENTUM, CLIP = 0.3, 0.9, 1.0
TASKS = {"a": 3, "b": 2}
DRAWN = (1, 0, 1)  # b, then a (b's module must stay put), then b again


def _tiny_trainer():
    keras.utils.set_random_seed(3)
    encoder = CvtEncoder(20, embedding_size=4, first_layer_size=4, second_layer_size=3,
                         filters=[[2, 2]], character_embedding_size=2,
                         max_characters_per_token=3, dropout=0.0, lstm_implementation="loop")
    return CrossViewTrainer(encoder, TASKS, hidden_size=8, labelled_dropout=0.0,
                            unlabelled_dropout=0.0)


def _update_rows(seed, rows=2, length=4):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 20, (rows, length)).astype("int32")
    return {"token_ids": ids, "character_ids": rng.integers(1, 262, (rows, length, 3)).astype(
        "int32"), "padding_mask": np.ones((rows, length), "int32")}


def _steps():
    """One cvt_dataset-like element per step: the drawn task's labelled batch, an unlabelled one."""
    rng = np.random.default_rng(7)
    return [{"task": np.full((2,), task, "int32"), "labelled": (
        _update_rows(10 + i), rng.integers(0, 2, (2, 4)).astype("int32")),
        "unlabelled": _update_rows(20 + i)} for i, task in enumerate(DRAWN)]


def _module_of(variable):
    return variable.path.split("/")[0]


def _reached_by(trainer, update):
    """The modules cvt_text's train op of `update` (a task name, or None: unlabelled) reaches."""
    primaries = {f"{t}_primary" for t in TASKS}
    auxiliaries = {f"{t}_{v}" for t in TASKS for v in AUXILIARY_VIEWS}
    unreached = (primaries if update is None
                 else auxiliaries | primaries - {f"{update}_primary"})
    return [v for v in trainer.trainable_variables if _module_of(v) not in unreached]


# The word table cvt_text reads with embedding_lookup (model/encoder.py), by the ids read.
# Its character table too, but keras_ctx updates that one whole (CvtSGD's kept
# differences, keras_ctx/pretraining/cvt.py): the reference does the same.
TABLES = {"token_embedding/embeddings": "token_ids"}


def _cvt_text_momentum(trainer, steps):
    """NumPy: each step's two train ops as cvt_text runs them; returns weights, accumulations.
    A lookup table's sparse gradient updates only the rows the minibatch read."""
    weights = {v.path: keras.ops.convert_to_numpy(v) for v in trainer.trainable_variables}
    accumulation = {path: np.zeros_like(w) for path, w in weights.items()}
    for step in steps:
        task = list(TASKS)[int(step["task"][0])]
        inputs, labels = step["labelled"]
        for update, read, losses in (
                (task, inputs,
                 lambda: trainer.supervised_losses(inputs, labels, task, training=True)),
                (None, step["unlabelled"], lambda: trainer.cvt_losses(step["unlabelled"]))):
            for v in trainer.trainable_variables:
                v.assign(weights[v.path])
            variables = _reached_by(trainer, update)
            _, _, grads = value_and_gradients(lambda: sum(losses().values()),
                                              variables=variables, compiled=GRADIENTS)
            norm = np.sqrt(sum(float(np.sum(g.astype("float64") ** 2)) for g in grads))
            scale = CLIP / max(norm, CLIP)
            for v, g in zip(variables, grads):
                rows = np.unique(read[TABLES[v.path]]) if v.path in TABLES else ...
                accumulation[v.path][rows] = MOMENTUM * accumulation[v.path][rows] + g[
                    rows] * scale
                weights[v.path][rows] = weights[v.path][rows] - LR * accumulation[v.path][rows]
    return weights, accumulation


def _state(trainer, modules):
    velocities = dict(zip([v.path for v in trainer.trainable_variables],
                          trainer.optimizer.momentums))
    return {v.path: (keras.ops.convert_to_numpy(v),
                     keras.ops.convert_to_numpy(velocities[v.path]))
            for v in trainer.trainable_variables if _module_of(v) in modules}


def test_a_weight_without_gradient_keeps_its_value_and_momentum():
    # Two weights, four updates; the second has no gradient in updates 2 and 4 (zeros, as
    # a traced `switch` gives an undrawn branch). NumPy: TF1's momentum on the weights
    # that have a gradient, after clipping the global norm of those to 1.
    gradients = [[np.array([3.0, -1.0]), np.array([0.5])],
                 [np.array([0.2, 0.4]), None],
                 [np.array([-0.1, 0.3]), np.array([-2.0])],
                 [np.array([0.6, 0.0]), None]]
    weights = [np.array([1.0, 2.0]), np.array([-1.0])]
    accumulation = [np.zeros(2), np.zeros(1)]
    variables = [keras.Variable(w.astype("float32")) for w in weights]
    optimizer = CvtSGD(LR, momentum=MOMENTUM, global_clipnorm=CLIP)
    optimizer.build(variables)
    seen = []
    for step in gradients:
        norm = np.sqrt(sum(np.sum(g ** 2) for g in step if g is not None))
        for i, g in enumerate(step):
            if g is not None:
                accumulation[i] = MOMENTUM * accumulation[i] + g * CLIP / max(norm, CLIP)
                weights[i] = weights[i] - LR * accumulation[i]
        optimizer.apply([keras.ops.convert_to_tensor(
            np.zeros_like(w) if g is None else g, "float32") for g, w in zip(step, weights)],
            variables)
        seen.append([keras.ops.convert_to_numpy(v) for v in optimizer.momentums])
        for variable, want in zip(variables, weights):
            np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), want, rtol=1e-6)
        for velocity, want in zip(seen[-1], accumulation):
            np.testing.assert_allclose(velocity, -LR * want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(seen[1][1], seen[0][1])  # not decayed


def test_a_lookup_tables_unread_rows_keep_their_value_and_momentum():
    # TF1's sparse momentum (cvt_text's embedding_lookup): an update touches the rows read.
    # Rows 0 and 2 read, then row 2 only, then rows 1 and 2; a weight beside, read each time.
    reads = [(0, 2), (2,), (1, 2)]
    rng = np.random.default_rng(0)
    table = keras.Variable(rng.normal(size=(3, 2)).astype("float32"), name="table")
    bias = keras.Variable(np.zeros(2, "float32"), name="bias")
    optimizer = CvtSGD(LR, momentum=MOMENTUM)
    optimizer.lookup_tables = frozenset({table.path})
    optimizer.build([table, bias])
    weights = [keras.ops.convert_to_numpy(table).astype("float64"), np.zeros(2)]
    accumulation = [np.zeros((3, 2)), np.zeros(2)]
    for rows in reads:
        grads = [np.zeros((3, 2)), rng.normal(size=2)]
        grads[0][list(rows)] = rng.normal(size=(len(rows), 2))
        for i, (g, where) in enumerate(zip(grads, (list(rows), slice(None)))):
            accumulation[i][where] = MOMENTUM * accumulation[i][where] + g[where]
            weights[i][where] -= LR * accumulation[i][where]
        optimizer.apply([keras.ops.convert_to_tensor(g, "float32") for g in grads],
                        [table, bias])
        for variable, want in zip((table, bias), weights):
            np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), want, rtol=1e-5,
                                       atol=1e-6)
    velocity = keras.ops.convert_to_numpy(optimizer.momentums[0])
    np.testing.assert_allclose(velocity, -LR * accumulation[0], rtol=1e-5, atol=1e-7)
    assert np.any(velocity[0])  # row 0 kept the momentum it had, unspent for two updates


def test_the_trainer_names_its_lookup_tables_to_the_optimizer():
    trainer = _tiny_trainer()
    trainer.compile(cvt_optimizer())
    assert trainer.optimizer.lookup_tables == frozenset(TABLES)


@pytest.mark.slow
def test_undrawn_task_keeps_its_weights_and_momentum_as_cvt_text_does(tmp_path):
    steps = _steps()
    reference = _tiny_trainer()
    want, accumulation = _cvt_text_momentum(reference, steps)

    trainer = _tiny_trainer()
    trainer.compile(CvtSGD(LR, momentum=MOMENTUM, global_clipnorm=CLIP), jit_compile=True)
    after = []
    for step in steps:  # compiled (a TF graph under XLA, jax.jit; eager on torch), one step each
        data = tf.data.Dataset.from_tensors(step)
        trainer.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
        after.append(_state(trainer, {"b_primary"}))
    path = tmp_path / "trainer.keras"
    trainer.save(str(path))  # a compiled trainer's archive names the rule
    with zipfile.ZipFile(path) as archive:
        saved = json.loads(archive.read("config.json"))["compile_config"]["optimizer"]
    assert saved["registered_name"] == "keras_ctx>CvtSGD"
    # Step 2 drew task a: b's primary module and its velocity did not move.
    for path, (weight, velocity) in after[1].items():
        np.testing.assert_array_equal(weight, after[0][path][0], err_msg=path)
        np.testing.assert_array_equal(velocity, after[0][path][1], err_msg=path)
        assert np.any(velocity), path  # it had momentum to spend
    velocities = dict(zip([v.path for v in trainer.trainable_variables],
                          trainer.optimizer.momentums))
    for v in trainer.trainable_variables:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(v), want[v.path],
                                   rtol=1e-4, atol=1e-5, err_msg=v.path)
        # Keras' velocity is -lr times TF1's accumulation (a constant learning rate).
        np.testing.assert_allclose(keras.ops.convert_to_numpy(velocities[v.path]),
                                   -LR * accumulation[v.path], rtol=1e-4, atol=1e-6,
                                   err_msg=v.path)


def test_cvt_optimizer_serializes_its_rule():
    optimizer = cvt_optimizer()
    saved = keras.saving.serialize_keras_object(optimizer)
    assert isinstance(optimizer, CvtSGD) and saved["registered_name"] == "keras_ctx>CvtSGD"
    restored = keras.saving.deserialize_keras_object(json.loads(json.dumps(saved)))
    assert type(restored) is CvtSGD and restored.get_config() == optimizer.get_config()
