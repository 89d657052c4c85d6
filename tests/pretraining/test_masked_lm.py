import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import masking, pipelines, segments
from keras_ctx.models import AlbertBackbone, BertBackbone
from keras_ctx.pretraining import (
    AlbertPretrainer,
    BertPretrainer,
    MaskedLMPretrainer,
    RobertaPretrainer,
)
from tests.backends import first_batch, slow_on
from tests.autodiff import no_gradient, value_and_gradients
from tests.execution import FEW_STEPS, GRADIENTS
from tests.pretraining import synthetic as syn

V = syn.VOCABULARY_SIZE
TINY = dict(vocabulary_size=V, num_layers=2, num_heads=2, hidden_size=32,
            intermediate_size=64, max_sequence_length=32, dropout=0.0)
SPECIALS = tuple(syn.SPECIAL.values())


_numpy = keras.ops.convert_to_numpy


def _mlm_batches(batch_size=32, length=24, count=120, seed=0):
    """Packed synthetic text, cached, then dynamically masked every epoch."""
    docs = syn.dataset(syn.documents(count, seed=seed))
    packed = segments.pack_sentences(docs, length, syn.SPECIAL["cls"], syn.SPECIAL["sep"],
                                     syn.SPECIAL["pad"], mode="doc_sentences", shuffle=False)
    batches = packed.batch(batch_size, drop_remainder=True).cache()
    return masking.MLMMasker(V, syn.SPECIAL["mask"], SPECIALS, dynamic=True).apply(batches)


def _first_and_last(history, key):
    values = history.history[key]
    return values[0], values[-1]


@slow_on("jax", "torch")  # torch: eager, minutes. Both: one step in test_matrix.py, equal to
# TensorFlow's (test_backends.py), and learning in test_jax_training.py
def test_tiny_bert_mlm_learns_the_synthetic_language_under_xla():
    data = _mlm_batches()
    model = RobertaPretrainer(BertBackbone(**dict(TINY, hidden_size=64, intermediate_size=128)))
    model.compile(optimizer=keras.optimizers.Adam(2e-3), jit_compile=True)
    history = model.fit(data.repeat(), steps_per_epoch=40, epochs=4, verbose=0)
    first, last = _first_and_last(history, "mlm_loss")
    assert last < 0.75 * first, history.history
    # Chance is 1/V ~ 1% (first epoch ~3%); a masked number is its neighbour +- the step.
    assert history.history["mlm_accuracy"][-1] > 0.15, history.history


def test_output_layer_is_tied_and_loss_matches_numpy():
    backbone = BertBackbone(**TINY)
    model = BertPretrainer(backbone)
    model.compile(optimizer="sgd", jit_compile=True)
    assert model.mlm_head.token_embedding.embeddings is backbone.token_embedding.embeddings
    assert not any("output_kernel" in w.path for w in model.weights)
    batch = first_batch(pipelines.bert_dataset(
        syn.dataset(syn.documents(80)), None, 8, sequence_length=24,
        special_ids=syn.SPECIAL, vocabulary_size=V))
    logits = model(batch)
    # The table is counted once: backbone + head transform/LN/bias + NSP dense.
    h = TINY["hidden_size"]
    head = (h * h + h) + 2 * h + V + (2 * h + 2)
    assert model.count_params() == backbone.count_params() + head
    mlm = _numpy(logits["mlm"]).astype("float64")
    labels, weights = batch["mask_ids"], batch["mask_weights"]
    log_p = mlm - np.log(np.exp(mlm - mlm.max(-1, keepdims=True)).sum(-1,
                                                                      keepdims=True)) - mlm.max(
        -1, keepdims=True)
    ce = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    want_mlm = (ce * weights).sum() / weights.sum()
    nsp = _numpy(logits["nsp"]).astype("float64")
    nsp_log_p = nsp - np.log(np.exp(nsp).sum(-1, keepdims=True))
    want_nsp = -nsp_log_p[np.arange(8), batch["next_sentence_labels"]].mean()
    result = model.evaluate(tf.data.Dataset.from_tensors(batch), verbose=0, return_dict=True)
    np.testing.assert_allclose(result["mlm_loss"], want_mlm, rtol=1e-4)
    np.testing.assert_allclose(result["nsp_loss"], want_nsp, rtol=1e-4)
    np.testing.assert_allclose(result["loss"], want_mlm + want_nsp, rtol=1e-4)
    # One gradient step moves the tied table through the output layer too.
    before = _numpy(backbone.token_embedding.embeddings).copy()
    model.fit(tf.data.Dataset.from_tensors(batch), verbose=0)
    assert not np.allclose(before, _numpy(backbone.token_embedding.embeddings))


def test_albert_pretrainer_ties_to_the_factorized_table_and_has_sop():
    backbone = AlbertBackbone(embedding_size=8, **TINY)
    model = AlbertPretrainer(backbone)
    assert model.mlm_head.token_embedding is backbone.token_embedding
    batch = first_batch(pipelines.albert_dataset(
        syn.dataset(syn.documents(80)), None, 4, sequence_length=24,
        special_ids=syn.SPECIAL, vocabulary_size=V, word_continuations=np.zeros(V, bool)))
    out = model(batch)
    assert out["mlm"].shape[-1] == V and out["sop"].shape == (4, 2)
    assert model.mlm_head.dense.kernel.shape == (32, 8)  # H -> E
    # One step (the XLA path is the same train_step, exercised by the BERT tests above
    # and by the slow ALBERT learning test).
    model.compile(optimizer="adam", **FEW_STEPS)
    result = model.fit(tf.data.Dataset.from_tensors(batch), verbose=0).history
    assert {"loss", "mlm_loss", "mlm_accuracy", "sop_loss", "sop_accuracy"} <= set(result)


def test_wrong_inputs_fail_clearly():
    backbone = BertBackbone(**TINY)
    with pytest.raises(ValueError, match="sentence_objective"):
        MaskedLMPretrainer(backbone, sentence_objective="nxp")
    model = RobertaPretrainer(backbone)
    long_batch = {"token_ids": np.zeros((2, 40), "int32"),
                  "padding_mask": np.ones((2, 40), "int32"),
                  "mask_positions": np.zeros((2, 6), "int32")}
    with pytest.raises(ValueError, match="max_sequence_length"):
        model(long_batch)


def _learn(pretrainer_cls, dataset_fn, backbone, steps=100, epochs=4, **masking):
    data = dataset_fn(syn.dataset(syn.documents(400)), None, 32, sequence_length=32,
                      special_ids=syn.SPECIAL, vocabulary_size=V, **masking)
    model = pretrainer_cls(backbone)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=True)
    return model.fit(data.repeat(), steps_per_epoch=steps, epochs=epochs, verbose=0).history


@pytest.mark.slow
def test_bert_mlm_and_nsp_learn():
    config = dict(TINY, hidden_size=64, intermediate_size=128)
    history = _learn(BertPretrainer, pipelines.bert_dataset, BertBackbone(**config), epochs=6)
    assert history["nsp_accuracy"][-1] > 0.75 and history["mlm_accuracy"][-1] > 0.4, history


@pytest.mark.slow
def test_albert_mlm_and_sop_learn():
    config = dict(TINY, hidden_size=64, intermediate_size=128)
    history = _learn(AlbertPretrainer, pipelines.albert_dataset,
                     AlbertBackbone(embedding_size=32, **config), epochs=8,
                     word_continuations=np.zeros(V, bool))  # every id a word
    assert history["sop_accuracy"][-1] > 0.75, history["sop_accuracy"]
    assert history["mlm_accuracy"][-1] > 0.15, history["mlm_accuracy"]  # chance ~1%


MIRRORED = r"""
import json, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
import keras
from keras_ctx.data import pipelines
from keras_ctx.models import BertBackbone
from keras_ctx.pretraining import BertPretrainer
from tests.pretraining import synthetic as syn
keras.utils.set_random_seed(0)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
data = pipelines.bert_dataset(syn.dataset(syn.documents(60)), None, 16, sequence_length=24,
                              special_ids=syn.SPECIAL, vocabulary_size=syn.VOCABULARY_SIZE)
with strategy.scope():
    model = BertPretrainer(BertBackbone(vocabulary_size=syn.VOCABULARY_SIZE, num_layers=2,
                                        num_heads=2, hidden_size=32, intermediate_size=64,
                                        max_sequence_length=32, dropout=0.0))
    # Two *logical* CPU devices + jit_compile=True hit TensorFlow's XLA known
    # issue "tf.Variable on a different device" (one XLA cluster reads the
    # other replica's variables); on real multi-GPU hosts XLA works.
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
history = model.fit(data.repeat(), steps_per_epoch=int(sys.argv[1]), epochs=3, verbose=0)
print(json.dumps({"replicas": strategy.num_replicas_in_sync, **history.history}))
"""


def _run_mirrored(steps):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", MIRRORED, str(steps)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.tensorflow_only("tf.distribute.MirroredStrategy over logical CPUs")
@pytest.mark.slow  # ~20 s: a fresh process with two logical CPU devices
def test_bert_pretrainer_trains_under_mirrored_strategy_on_two_cpus():
    history = _run_mirrored(steps=8)
    assert history["replicas"] == 2
    assert np.all(np.isfinite(history["loss"]))
    assert history["mlm_loss"][-1] < history["mlm_loss"][0], history


def test_pretrainer_keras_file_round_trip_keeps_the_tie(tmp_path):
    batch = first_batch(pipelines.bert_dataset(
        syn.dataset(syn.documents(40)), None, 4, sequence_length=24,
        special_ids=syn.SPECIAL, vocabulary_size=V))
    model = BertPretrainer(BertBackbone(**dict(TINY, num_layers=1)))
    want = model(batch)
    model.save(tmp_path / "pretrainer.keras")
    loaded = keras.saving.load_model(tmp_path / "pretrainer.keras")
    got = loaded(batch)
    np.testing.assert_allclose(_numpy(got["mlm"]), _numpy(want["mlm"]), atol=1e-6)
    np.testing.assert_allclose(_numpy(got["nsp"]), _numpy(want["nsp"]), atol=1e-6)
    assert loaded.mlm_head.token_embedding.embeddings is (
        loaded.backbone.token_embedding.embeddings)


@pytest.mark.parametrize("family", ["bert", "albert", "electra_generator"])
def test_sparse_last_layer_gives_the_same_logits_and_gradients(family):
    """Computing the last layer at the masked positions (and [CLS]) only is exact."""
    from keras_ctx.models.electra.backbone import ElectraBackbone, electra_generator

    config = dict(TINY, dropout=0.1)  # dropout is off in the comparison (training=False)
    if family == "bert":
        backbone, cls = BertBackbone(**config), BertPretrainer
    elif family == "albert":
        backbone, cls = AlbertBackbone(embedding_size=8, **config), AlbertPretrainer
    else:
        backbone, cls = electra_generator(ElectraBackbone(**config)), RobertaPretrainer
    assert backbone.supports_sequence_output_at
    model = cls(backbone)
    assert model._sparse() and not cls(backbone, sparse_last_layer=False)._sparse()
    dataset = pipelines.albert_dataset if family == "albert" else pipelines.bert_dataset
    words = {"word_continuations": np.zeros(V, bool)} if family == "albert" else {}
    batch = first_batch(dataset(
        syn.dataset(syn.documents(80)), None, 4, sequence_length=24,
        special_ids=syn.SPECIAL, vocabulary_size=V, **words))
    batch["padding_mask"][0, 18:] = 0  # padded keys must stay masked in the sparse layer

    def loss_and_gradients(sparse_last_layer):
        model.sparse_last_layer = sparse_last_layer  # one model: the same head weights
        outputs = keras.tree.map_structure(_numpy, model(batch, training=False))
        _, _, gradients = value_and_gradients(
            lambda: model.total_loss(model.compute_losses(batch, training=False)),
            variables=backbone.trainable_variables, compiled=GRADIENTS)
        return outputs, gradients

    sparse_out, sparse_grads = loss_and_gradients(True)
    dense_out, dense_grads = loss_and_gradients(False)
    for name in dense_out:
        np.testing.assert_allclose(sparse_out[name], dense_out[name], atol=1e-4)
    used = [(s, d) for s, d in zip(sparse_grads, dense_grads) if not no_gradient(d)]
    assert len(used) > 10
    for s, d in used:
        np.testing.assert_allclose(s, d, atol=1e-5)


def test_xlm_pretrainer_uses_xlm_pred_layer_head():
    """XLM's PredLayer: logits = h_p E^T + b (tied, bias, no transform)."""
    from keras_ctx.data.multilingual import xlm_masker
    from keras_ctx.models.xlm.backbone import XLMBackbone

    backbone = XLMBackbone(V, 1, 2, 32, 128, num_languages=2, max_sequence_length=32,
                           dropout=0.0, attention_dropout=0.0)
    model = MaskedLMPretrainer(backbone, head_transform=False)
    assert model.mlm_head.transform is False
    assert MaskedLMPretrainer(backbone).mlm_head.transform is True
    assert MaskedLMPretrainer.from_config(model.get_config()).head_transform is False
    rng = np.random.default_rng(0)
    ids = rng.integers(10, V, (4, 16)).astype("int32")
    ids[:, 0] = syn.SPECIAL["sep"]
    batch = {"token_ids": ids, "padding_mask": np.ones_like(ids),
             "position_ids": np.tile(np.arange(16, dtype="int32"), (4, 1)),
             "language_ids": np.zeros_like(ids)}
    masker = xlm_masker(V, syn.SPECIAL["mask"], syn.SPECIAL["sep"], syn.SPECIAL["pad"],
                        np.ones(V), seed=1)
    batch = first_batch(masker.apply(tf.data.Dataset.from_tensors(batch)))
    model.mlm_head.build((None, None, 32))
    model.mlm_head.output_bias.assign(rng.normal(size=V).astype("float32"))
    logits = _numpy(model(batch)["mlm"])
    assert model.count_params() == backbone.count_params() + V  # only the output bias
    inputs = {k: batch[k] for k in ("token_ids", "padding_mask", "position_ids",
                                    "language_ids")}
    hidden = _numpy(backbone(inputs)["sequence_output"])
    rows = np.take_along_axis(hidden, batch["mask_positions"][:, :, None], axis=1)
    want = rows @ _numpy(backbone.token_embedding.embeddings).T + (
        _numpy(model.mlm_head.output_bias))
    np.testing.assert_allclose(logits, want, atol=1e-4)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=True)
    history = model.fit(tf.data.Dataset.from_tensors(batch).repeat(8), verbose=0).history
    assert np.isfinite(history["mlm_loss"][-1])
