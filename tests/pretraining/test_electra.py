import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import masking
from keras_ctx.models import BertBackbone, ElectraBackbone, electra_generator
from keras_ctx.pretraining import ElectraPretrainer
from keras_ctx.pretraining.electra import replace_masked_tokens
from tests.backends import first_batch
from tests.autodiff import no_gradient, value_and_gradients
from tests.execution import GRADIENTS

# A tiny language: [CLS] w w ... w [SEP] [PAD]..: one word repeated. A replaced
# token is the odd one out; a good MLM generator copies the neighbours.
SPECIALS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
WORDS = 20
V = len(SPECIALS) + WORDS
T = 16
DISC = dict(vocabulary_size=V, num_layers=2, num_heads=2, hidden_size=32,
            intermediate_size=64, embedding_size=16, max_sequence_length=T, dropout=0.0)


def _electra_batches(vocabulary_size=V, batch_size=32, count=512, seed=0):
    rng = np.random.default_rng(seed)
    words = len(SPECIALS) + rng.integers(0, vocabulary_size - len(SPECIALS), count)
    lengths = rng.integers(T // 2, T + 1, count)
    ids = np.zeros((count, T), "int32")
    for row, (word, length) in enumerate(zip(words, lengths)):
        ids[row, :length] = [SPECIALS["cls"]] + [word] * (length - 2) + [SPECIALS["sep"]]
    data = {"token_ids": ids, "padding_mask": (ids > 0).astype("int32"),
            "segment_ids": np.zeros_like(ids)}
    dataset = tf.data.Dataset.from_tensor_slices(data).repeat().shuffle(count, seed=seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    masker = masking.MLMMasker(vocabulary_size, SPECIALS["mask"], tuple(SPECIALS.values()),
                               dynamic=True, seed=seed)
    return masker.apply(dataset), ids


_numpy = keras.ops.convert_to_numpy


def _pretrainer(hidden_fraction=0.5, **kwargs):
    discriminator = ElectraBackbone(**DISC)
    return ElectraPretrainer(electra_generator(discriminator, hidden_fraction), discriminator,
                             **kwargs)


def test_embeddings_are_the_same_variables_in_both_networks():
    model = _pretrainer()
    gen, disc = model.generator, model.discriminator
    for name in ("token_embedding", "position_embedding", "segment_embedding",
                 "embeddings_norm"):
        for a, b in zip(gen.get_layer(name).weights, disc.get_layer(name).weights):
            assert a is b
    # The MLM output layer reads the same table; every variable is trained once.
    assert model.mlm_head.token_embedding.embeddings is disc.token_embedding.embeddings
    ids = [id(v) for v in model.trainable_variables]
    assert len(ids) == len(set(ids))
    shared = {id(v) for v in gen.weights} & {id(v) for v in disc.weights}
    assert len(shared) == 5  # token, position, segment tables + LayerNorm gamma, beta
    # Untied networks are refused unless asked for.
    other = BertBackbone(V, 1, 2, 16, 32, max_sequence_length=T)
    with pytest.raises(ValueError, match="share their token embeddings"):
        ElectraPretrainer(other, model.discriminator)
    # Generic over backbones: two untied BERT encoders work too.
    untied = ElectraPretrainer(other, BertBackbone(V, 1, 2, 32, 64, max_sequence_length=T),
                               share_embeddings=False)
    batch = next(iter(_electra_batches(count=64)[0]))
    out = untied(batch)
    assert out["mlm"].shape == (32, batch["mask_positions"].shape[1], V)
    assert out["rtd"].shape == (32, T)


def test_labels_hand_computed_including_a_sample_equal_to_the_original():
    # Original row [2, 10, 11, 12, 13, 3, 0]; positions 1, 2, 4 were masked.
    masked = np.array([[2, 4, 4, 12, 9, 3, 0]], "int32")
    positions = np.array([[1, 2, 4, 0]], "int32")
    mask_ids = np.array([[10, 11, 13, 0]], "int32")
    weights = np.array([[1, 1, 1, 0]], "float32")
    sampled = np.array([[10, 17, 5, 8]], "int32")  # 10 == original; slot 3 unused
    padding = np.array([[1, 1, 1, 1, 1, 1, 0]], "int32")
    out = replace_masked_tokens(masked, positions, mask_ids, weights, sampled, padding)
    np.testing.assert_array_equal(out["original_token_ids"], [[2, 10, 11, 12, 13, 3, 0]])
    np.testing.assert_array_equal(out["token_ids"], [[2, 10, 17, 12, 5, 3, 0]])
    np.testing.assert_array_equal(out["labels"], [[0, 0, 1, 0, 1, 0, 0]])


def test_generator_sparse_last_layer_gives_the_full_generator_logits():
    data, _ = _electra_batches(count=64)
    batch = first_batch(data)
    model = _pretrainer()
    assert model.sparse_last_layer and model.generator.supports_sequence_output_at
    sparse = _numpy(model(batch)["mlm"])
    model.sparse_last_layer = False
    np.testing.assert_allclose(sparse, _numpy(model(batch)["mlm"]), atol=1e-5)


def test_labels_are_exactly_where_the_corrupted_token_differs_in_the_model():
    # A 7-token vocabulary: the untrained generator often samples the original.
    data, _ = _electra_batches(vocabulary_size=7, count=64)
    batch = first_batch(data)
    discriminator = ElectraBackbone(**dict(DISC, vocabulary_size=7))
    model = ElectraPretrainer(electra_generator(discriminator, 0.5), discriminator)
    out = {k: _numpy(v) for k, v in model(batch).items()}
    weights = batch["mask_weights"] > 0
    positions = batch["mask_positions"]
    original = batch["token_ids"].copy()
    for row in range(original.shape[0]):
        original[row, positions[row][weights[row]]] = batch["mask_ids"][row][weights[row]]
    np.testing.assert_array_equal(out["original_token_ids"], original)
    corrupted = original.copy()
    for row in range(original.shape[0]):
        corrupted[row, positions[row][weights[row]]] = out["sampled_ids"][row][weights[row]]
    np.testing.assert_array_equal(out["token_ids"], corrupted)
    np.testing.assert_array_equal(out["labels"], (corrupted != original).astype("int32"))
    same = (out["sampled_ids"] == batch["mask_ids"]) & weights
    assert same.sum() > 0 and (~same & weights).sum() > 0  # both cases occur
    # Masked positions whose sample equals the original are labelled original.
    rows, slots = np.nonzero(same)
    assert not out["labels"][rows, positions[rows, slots]].any()
    assert out["labels"].sum() == (~same & weights).sum()


def test_discriminator_loss_does_not_reach_the_generator_through_sampling():
    data, _ = _electra_batches(count=64)
    batch = first_batch(data)
    model = _pretrainer()
    model(batch)  # built before the gradient (JAX creates no variables in a trace)
    disc_ids = {id(v) for v in model.discriminator.trainable_variables}
    generator_only = [v for v in model.generator.trainable_variables
                      + model.mlm_head.trainable_variables if id(v) not in disc_ids]
    rest = [v for v in model.discriminator.trainable_variables
            + model.rtd_head.trainable_variables]
    _, _, grads = value_and_gradients(
        lambda: model.losses_from_outputs(batch, model(batch, training=True))["rtd"],
        variables=generator_only + rest, compiled=GRADIENTS)
    assert len(generator_only) > 10
    for v, g in zip(generator_only, grads[:len(generator_only)]):
        assert no_gradient(g) or not np.any(g), v.path
    assert not any(no_gradient(g) for g in grads[len(generator_only):])
    table = model.discriminator.token_embedding.embeddings
    table_grad = grads[len(generator_only):][[id(v) for v in rest].index(id(table))]
    assert np.any(table_grad)


def test_losses_match_numpy_and_total_weights_the_discriminator_by_50():
    data, _ = _electra_batches(count=64)
    batch = first_batch(data)
    model = _pretrainer()
    outputs = model(batch)
    losses = model.losses_from_outputs(batch, outputs)
    z = _numpy(outputs["rtd"]).astype("float64")
    y = _numpy(outputs["labels"])
    m = batch["padding_mask"]
    bce = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    losses = {name: _numpy(loss) for name, loss in losses.items()}
    np.testing.assert_allclose(losses["rtd"], (bce * m).sum() / m.sum(), rtol=1e-5)
    logits = _numpy(outputs["mlm"]).astype("float64")
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    ce = -np.take_along_axis(log_p, batch["mask_ids"][..., None], -1)[..., 0]
    w = batch["mask_weights"]
    np.testing.assert_allclose(losses["mlm"], (ce * w).sum() / w.sum(), rtol=1e-5)
    assert model.discriminator_weight == 50.0
    np.testing.assert_allclose(_numpy(model.total_loss(losses)),
                               losses["mlm"] + 50.0 * losses["rtd"], rtol=1e-6)


@pytest.mark.slow  # 500 XLA steps; one step of each precision/strategy runs in tests/pretraining/test_matrix.py
def test_tiny_electra_learns_replaced_token_detection_under_xla():
    data, _ = _electra_batches()
    model = _pretrainer()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=True)
    history = model.fit(data, steps_per_epoch=100, epochs=5, verbose=0).history
    assert {"loss", "generator_loss", "generator_accuracy", "discriminator_loss",
            "discriminator_accuracy", "discriminator_precision", "discriminator_recall",
            "sampled_original_rate"} <= set(history)
    # Share of original (label 0) tokens among real tokens, in fresh batches.
    result = model.evaluate(data, steps=10, verbose=0, return_dict=True)
    labels, mask = [], []
    for batch in data.take(5):
        out = model(batch)
        labels.append(_numpy(out["labels"]))
        mask.append(batch["padding_mask"])
    labels, mask = np.concatenate(labels), np.concatenate(mask)
    original_share = 1.0 - labels.sum() / mask.sum()
    assert 0.8 < original_share < 0.97, original_share
    # Well above always answering "original": at least half the replaced tokens' errors gone.
    assert result["discriminator_accuracy"] > original_share + 0.5 * (1 - original_share), (
        result, original_share)
    assert result["discriminator_recall"] > 0.5 and result["discriminator_precision"] > 0.5
    assert history["generator_loss"][-1] < history["generator_loss"][0]


def test_two_stage_schedule_freezes_the_right_weights():
    data, _ = _electra_batches(count=64)
    batch = first_batch(data)
    model = _pretrainer(hidden_fraction=1.0, stage="generator")
    model.compile(optimizer=keras.optimizers.Adam(1e-2))  # "auto": a TF graph on a CPU
    disc_ids = {id(v) for v in model.discriminator.weights}
    gen_only = [v for v in model.generator.weights if id(v) not in disc_ids]
    disc_only = [v for v in model.discriminator.weights
                 if id(v) not in {id(w) for w in model.generator.weights}]
    disc_only += model.rtd_head.weights

    def snapshot(variables):
        return [_numpy(v).copy() for v in variables]

    before_gen, before_disc = snapshot(gen_only), snapshot(disc_only)
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(2), verbose=0)
    assert all(np.array_equal(a, _numpy(v)) for a, v in zip(before_disc, disc_only))
    assert any(not np.array_equal(a, _numpy(v)) for a, v in zip(before_gen, gen_only))

    model.set_stage("discriminator")  # initialises the discriminator from the generator
    for g, d in zip(model.generator.weights, model.discriminator.weights):
        np.testing.assert_array_equal(_numpy(g), _numpy(d))
    # (The MLM head's tied table is the shared one, which trains with the discriminator.)
    gen_only += [v for v in model.mlm_head.weights if id(v) not in disc_ids]
    before_gen, before_disc = snapshot(gen_only), snapshot(disc_only)
    history = model.fit(tf.data.Dataset.from_tensors(batch).repeat(2), verbose=0).history
    changed = [v.path for a, v in zip(before_gen, gen_only) if not np.array_equal(a, _numpy(v))]
    assert not changed, changed
    assert any(not np.array_equal(a, _numpy(v)) for a, v in zip(before_disc, disc_only))
    np.testing.assert_allclose(history["loss"][-1], 50.0 * history["discriminator_loss"][-1],
                               rtol=1e-5)
    # Two different sizes cannot be initialised from each other.
    with pytest.raises(ValueError, match="same size"):
        _pretrainer(hidden_fraction=0.5).set_stage("discriminator")
    with pytest.raises(ValueError, match="stage"):
        _pretrainer(stage="both")


def test_keras_file_round_trip_keeps_the_shared_embeddings(tmp_path):
    data, _ = _electra_batches(count=64)
    batch = first_batch(data)
    model = _pretrainer(seed=3)
    model.save(tmp_path / "electra.keras")
    loaded = keras.saving.load_model(tmp_path / "electra.keras")
    assert (loaded.generator.token_embedding.embeddings
            is loaded.discriminator.token_embedding.embeddings)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(_numpy(a), _numpy(b))
    # Only the discriminator is kept for fine-tuning / export.
    model.discriminator.save(tmp_path / "discriminator.keras")
    disc = keras.saving.load_model(tmp_path / "discriminator.keras")
    inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    np.testing.assert_allclose(_numpy(disc(inputs)["sequence_output"]),
                               _numpy(model.discriminator(inputs)["sequence_output"]), atol=1e-6)


def test_from_preset_builds_table_6_generator_sharing_embeddings():
    model = ElectraPretrainer.from_preset(
        "electra-small", backbone_overrides=dict(num_layers=1, vocabulary_size=100,
                                                 max_sequence_length=T))
    gen, disc = model.generator, model.discriminator
    assert (disc.hidden_size, disc.embedding_size) == (256, 128)
    assert (gen.hidden_size, gen.num_heads, gen.intermediate_size) == (64, 1, 256)
    assert gen.token_embedding.embeddings is disc.token_embedding.embeddings
    assert model.mlm_head.dense.kernel.shape == (64, 128)  # H_g -> E, tied V x E table
