import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.models.elmo.backbone import Elmo, ElmoBackbone
from keras_ctx.data.vocabulary import bilm_inputs, make_vocabulary
from keras_ctx.pretraining.bilm import BiLMPretrainer, _targets
from tests.backends import slow_on

TOPICS = (["ab", "cd", "ef", "gh"], ["ij", "kl", "mn", "op"])
WORDS = TOPICS[0] + TOPICS[1] + ["bank"]


def synthetic_sentences(count, seed=0, with_topics=False):
    """A tiny language with an ambiguous word.

    A sentence picks a topic, walks that topic's word cycle from a random
    start, and has "bank" (shared by both topics: two senses) somewhere after
    the first word; the walk goes on after it. So next and previous words are
    predictable, and the sense of "bank" is given by its context only.
    """
    rng = np.random.default_rng(seed)
    out, topics, positions = [], [], []
    for _ in range(count):
        topic = int(rng.integers(2))
        cycle = TOPICS[topic]
        start, length = rng.integers(4), int(rng.integers(2, 5))
        words = [cycle[(start + i) % 4] for i in range(length)]
        position = int(rng.integers(1, length + 1))
        words.insert(position, "bank")
        out.append(" ".join(words))
        topics.append(topic)
        positions.append(position + 1)  # +1 for <S>
    return (out, np.array(topics), np.array(positions)) if with_topics else out


def bilm_batches(vocabulary, count=128, batch=16, seed=0):
    ds = tf.data.Dataset.from_tensor_slices(synthetic_sentences(count, seed))
    ds = ds.batch(batch, drop_remainder=True)
    return ds.map(lambda s: bilm_inputs(s, vocabulary, sequence_length=8))


def tiny_pretrainer(vocabulary, num_sampled):
    backbone = ElmoBackbone(
        projection_dim=16, lstm_units=32, filters=[[1, 8], [2, 8], [3, 8]], num_highway_layers=1
    )
    return BiLMPretrainer(backbone, len(vocabulary), num_sampled=num_sampled)


def test_targets_shift_each_direction():
    ids = np.array([[1, 5, 6, 2, 0]])
    fwd, fwd_w, bwd, bwd_w = (keras.ops.convert_to_numpy(t) for t in _targets(ids))
    np.testing.assert_array_equal(fwd, [[5, 6, 2, 0, 0]])
    np.testing.assert_array_equal(fwd_w, [[1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(bwd, [[0, 1, 5, 6, 2]])  # weight 0 at padding
    np.testing.assert_array_equal(bwd_w, [[0, 1, 1, 1, 0]])


def test_sampled_softmax_matches_tf_sampled_softmax_loss():
    vocabulary = make_vocabulary(WORDS)
    model = tiny_pretrainer(vocabulary, num_sampled=7)
    rng = np.random.default_rng(0)
    model.softmax_bias.assign(rng.normal(size=len(vocabulary)).astype("float32"))
    h = rng.normal(size=(10, 16)).astype("float32")
    labels = rng.integers(1, len(vocabulary), size=10).astype("int32")
    sampled = model.sample_candidates()
    assert (keras.ops.convert_to_numpy(sampled) < len(vocabulary)).all()
    ours = model._sampled_nll(keras.ops.convert_to_tensor(h), labels, sampled)
    sampled = keras.ops.convert_to_numpy(sampled)
    # TensorFlow's loss, on this backend's numbers, is the reference.
    q = lambda ids: keras.ops.convert_to_numpy(model._log_uniform(ids)) * 7  # noqa: E731
    want = tf.nn.sampled_softmax_loss(
        weights=keras.ops.convert_to_numpy(model.softmax_kernel),
        biases=keras.ops.convert_to_numpy(model.softmax_bias),
        labels=tf.cast(labels[:, None], "int64"), inputs=h, num_sampled=7,
        num_classes=len(vocabulary),
        sampled_values=(tf.cast(sampled, "int64"), q(labels)[:, None], q(sampled)),
        remove_accidental_hits=True,
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), want.numpy(), rtol=1e-5)


def test_bilm_inputs():
    vocabulary = make_vocabulary(WORDS)
    x = bilm_inputs(tf.constant(["ab cd", "zz"]), vocabulary[:12], 5)
    np.testing.assert_array_equal(x["token_ids"].numpy(), [[1, 4, 5, 2, 0], [1, 3, 2, 0, 0]])
    assert x["character_ids"].shape == (2, 5, 50)
    with pytest.raises(ValueError, match="make_vocabulary"):
        bilm_inputs(tf.constant(["a"]), ["<pad>", "a"], 4)


def sense_accuracy(features, topics, positions):
    """A linear least-squares probe of the sense of "bank" from its features."""
    x = features[np.arange(len(topics)), positions].astype("float64")
    x = np.concatenate([x, np.ones((len(x), 1))], 1)
    half = len(topics) // 2
    w = np.linalg.lstsq(x[:half], 2.0 * topics[:half] - 1, rcond=None)[0]
    return float(np.mean((x[half:] @ w > 0) == topics[half:]))


@slow_on("jax", "torch")  # torch: eager, minutes. Both: one step in test_matrix.py, equal to
# TensorFlow's (test_backends.py), and learning in test_jax_training.py
def test_tiny_bilm_perplexity_falls_under_xla_and_its_features_tell_senses():
    vocabulary = make_vocabulary(WORDS)  # 13 ids
    # Train with a sampled softmax (6 of 12 ids), evaluate with the full one.
    model = tiny_pretrainer(vocabulary, num_sampled=6)
    assert model.use_sampled_softmax
    model.compile(optimizer=keras.optimizers.Adam(0.01), jit_compile=True)
    before = model.evaluate(bilm_batches(vocabulary, 32, seed=1), verbose=0, return_dict=True)
    history = model.fit(bilm_batches(vocabulary, 256), epochs=15, verbose=0)
    after = model.evaluate(bilm_batches(vocabulary, 32, seed=1), verbose=0, return_dict=True)
    assert np.isfinite(history.history["loss"]).all()
    assert before["perplexity"] > 8.0  # about uniform over the 13 ids
    assert after["forward_perplexity"] < 0.5 * before["forward_perplexity"], (before, after)
    assert after["backward_perplexity"] < 0.5 * before["backward_perplexity"], (before, after)
    # Chance is 1/13; "bank" and the first word are not predictable.
    assert after["forward_accuracy"] > 0.3 and after["backward_accuracy"] > 0.3
    logits = model(next(iter(bilm_batches(vocabulary, 16))))
    assert logits["forward_logits"].shape == (16, 8, len(vocabulary))

    # Downstream: the sense of "bank" from frozen ELMo features (ScalarMix of
    # the biLM layers) vs context-free random word vectors.
    sentences, topics, positions = synthetic_sentences(128, seed=7, with_topics=True)
    x = bilm_inputs(tf.constant(sentences), vocabulary, 8)
    elmo = Elmo(model.backbone)
    elmo_features = keras.ops.convert_to_numpy(elmo(x["character_ids"]))
    random_table = np.random.default_rng(0).normal(size=(len(vocabulary), 32))
    random_features = random_table[x["token_ids"].numpy()]
    elmo_accuracy = sense_accuracy(elmo_features, topics, positions)
    random_accuracy = sense_accuracy(random_features, topics, positions)
    assert random_accuracy < 0.7  # same word, same vector: chance
    assert elmo_accuracy > 0.9 and elmo_accuracy > random_accuracy + 0.25


def test_pretrainer_keras_round_trip(tmp_path):
    vocabulary = make_vocabulary(WORDS)
    model = tiny_pretrainer(vocabulary, num_sampled=5)
    x = bilm_inputs(tf.constant(["ab cd bank", "ij"]), vocabulary, 6)
    before = keras.ops.convert_to_numpy(model(x)["backward_logits"])
    model.save(tmp_path / "bilm.keras")
    loaded = keras.saving.load_model(tmp_path / "bilm.keras")
    assert loaded.num_sampled == 5 and loaded.vocabulary_size == len(vocabulary)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)["backward_logits"]), before)
