import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data.parallel import (
    TARGET_SPECIALS,
    build_vocabulary,
    filter_long_pairs,
    parallel_text_dataset,
    translation_inputs,
)
from keras_ctx.models.cove.backbone import Cove, CoveBackbone
from keras_ctx.pretraining.translation import TranslationPretrainer
from tests.backends import slow_on

WORDS = "red green blue cyan pink gold grey teal".split()


def reverse_corpus(count, seed=0):
    """Source: random words; target: the same words reversed and upper-cased."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        words = list(rng.choice(WORDS, size=rng.integers(2, 6)))
        pairs.append((" ".join(words), " ".join(w.upper() for w in reversed(words))))
    return pairs


def write_parallel_corpus(tmp_path, pairs):
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    src.write_text("\n".join(p[0] for p in pairs) + "\n")
    tgt.write_text("\n".join(p[1] for p in pairs) + "\n")
    tsv = tmp_path / "train.tsv"
    tsv.write_text("\n".join(f"{a}\t{b}" for a, b in pairs) + "\n")
    return str(src), str(tgt), str(tsv)


def test_parallel_data_two_files_and_tsv(tmp_path):
    pairs = [("a b", "X Y"), ("c", "Z")]
    src, tgt, tsv = write_parallel_corpus(tmp_path, pairs)
    got = [(s.numpy().decode(), t.numpy().decode()) for s, t in parallel_text_dataset(src, tgt)]
    assert got == pairs
    got = [(s.numpy().decode(), t.numpy().decode()) for s, t in parallel_text_dataset(tsv)]
    assert got == pairs
    sv = build_vocabulary([p[0] for p in pairs])
    tv = build_vocabulary([p[1] for p in pairs], specials=TARGET_SPECIALS)
    x, labels = translation_inputs(
        tf.constant(["a b", "c q"]), tf.constant(["X Y", "Z"]), sv, tv, 3, 4
    )
    np.testing.assert_array_equal(x["encoder_token_ids"].numpy(), [[2, 3, 0], [4, 1, 0]])
    # decoder reads <s> y..., labels are y... </s>
    np.testing.assert_array_equal(x["decoder_token_ids"].numpy(), [[1, 4, 5, 0], [1, 6, 0, 0]])
    np.testing.assert_array_equal(labels.numpy(), [[4, 5, 2, 0], [6, 2, 0, 0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than"):
        translation_inputs(tf.constant(["a b c d"]), tf.constant(["X"]), sv, tv, 3, 4)
    assert len(list(filter_long_pairs(parallel_text_dataset(tsv), 1, 2))) == 1
    (tmp_path / "short.tgt").write_text("X\n")
    with pytest.raises(ValueError, match="aligned"):
        parallel_text_dataset(src, str(tmp_path / "short.tgt"))


@slow_on("torch")  # eager on torch: minutes; one step in test_matrix.py
def test_tiny_cove_learns_to_reverse_and_serves_as_frozen_layer(tmp_path):
    pairs = reverse_corpus(512)
    src, tgt, _ = write_parallel_corpus(tmp_path, pairs)
    sv = build_vocabulary([p[0] for p in pairs])
    tv = build_vocabulary([p[1] for p in pairs], specials=TARGET_SPECIALS)
    ds = parallel_text_dataset(src, tgt).batch(32, drop_remainder=True)
    ds = ds.map(lambda s, t: translation_inputs(s, t, sv, tv, 6, 7)).cache()
    glove = np.random.default_rng(0).normal(size=(len(sv), 8)).astype("float32")
    glove[0] = 0
    encoder = CoveBackbone(len(sv), embedding_size=8, hidden_size=16, embeddings=glove)
    model = TranslationPretrainer(encoder, len(tv), target_embedding_dim=8, decoder_units=32)
    model.compile(optimizer=keras.optimizers.Adam(0.02), jit_compile=True)
    history = model.fit(ds, epochs=8, verbose=0)
    accuracy = history.history["accuracy"]
    chance = 1.0 / (len(tv) - 1)
    assert accuracy[0] < 0.5 and accuracy[-1] > 0.9, accuracy  # well above chance
    assert accuracy[-1] > 5 * chance
    np.testing.assert_array_equal(encoder.token_embedding.embeddings.numpy(), glove)  # fixed
    # Greedy decoding reverses an unseen sentence.
    words = ["gold", "red", "teal"]
    ids = np.array([[sv.index(w) for w in words] + [0, 0, 0]])
    out = model.greedy_translate(ids, 7)[0]
    assert [tv[i] for i in out[:4]] == ["TEAL", "RED", "GOLD", "</s>"]

    # The trained encoder as a frozen Cove layer in a user's model.
    inputs = keras.Input((None,), dtype="int32")
    cove = Cove(encoder)
    features = cove(inputs)
    assert features.shape[-1] == 8 + 32  # [GloVe; CoVe]
    pooled = keras.layers.GlobalAveragePooling1D()(features)
    user = keras.Model(inputs, keras.layers.Dense(1)(pooled))
    assert len(user.trainable_weights) == 2
    values = keras.ops.convert_to_numpy(cove(ids))
    np.testing.assert_allclose(values[..., :8], glove[ids])
    encoded = encoder({"token_ids": ids, "padding_mask": (ids != 0).astype("int32")})
    np.testing.assert_allclose(values[..., 8:], encoded["sequence_output"], atol=1e-6)
    revived = Cove.from_config(cove.get_config())
    assert revived.backbone.get_config() == encoder.get_config()


def test_pretrainer_keras_round_trip(tmp_path):
    model = TranslationPretrainer(
        CoveBackbone(10, embedding_size=4, hidden_size=5), 12, target_embedding_dim=3,
        decoder_units=7,
    )
    x = {"encoder_token_ids": np.array([[1, 2, 3]]), "encoder_padding_mask": np.array([[1, 1, 0]]),
         "decoder_token_ids": np.array([[1, 4, 5]]), "decoder_padding_mask": np.array([[1, 1, 1]])}
    before = keras.ops.convert_to_numpy(model(x))
    assert before.shape == (1, 3, 12)
    model.save(tmp_path / "mt.keras")
    loaded = keras.saving.load_model(tmp_path / "mt.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), before)


def test_each_side_ids_are_checked_against_their_own_vocabulary_before_a_compiled_step():
    from keras_ctx.models.checked_input import checked_token_ids

    # Source vocabulary 10, target 12: decoder id 11 is fine, 12 is not; encoder id 10 is not.
    model = TranslationPretrainer(CoveBackbone(10, embedding_size=4, hidden_size=5), 12,
                                  target_embedding_dim=3, decoder_units=7)

    def batch(encoder_id, decoder_id):
        return {"encoder_token_ids": np.array([[1, encoder_id]]),
                "encoder_padding_mask": np.ones((1, 2), "int32"),
                "decoder_token_ids": np.array([[1, decoder_id]]),
                "decoder_padding_mask": np.ones((1, 2), "int32")}

    checked_token_ids(batch(9, 11), model)
    for encoder_id, decoder_id, name in ((9, 12, "decoder_token_ids must be in \\[0, 12\\)"),
                                         (10, 11, "encoder_token_ids must be in \\[0, 10\\)")):
        with pytest.raises(ValueError, match=name):
            checked_token_ids(batch(encoder_id, decoder_id), model)
        dataset = tf.data.Dataset.from_tensors(batch(encoder_id, decoder_id))
        with pytest.raises(tf.errors.InvalidArgumentError, match=name):
            list(checked_token_ids(dataset, model))


def test_given_weights_are_honoured_and_labels_are_required():
    """(x, labels) weighs every real label; (x, labels, weights) weighs as the caller says."""
    model = TranslationPretrainer(CoveBackbone(10, embedding_size=4, hidden_size=5), 12,
                                  target_embedding_dim=3, decoder_units=7)
    model.compile(optimizer="adam")
    x = {"encoder_token_ids": np.array([[1, 2, 3], [4, 5, 0]]),
         "encoder_padding_mask": np.array([[1, 1, 1], [1, 1, 0]]),
         "decoder_token_ids": np.array([[1, 4, 5], [1, 6, 0]]),
         "decoder_padding_mask": np.array([[1, 1, 1], [1, 1, 0]])}
    labels = np.array([[4, 5, 2], [6, 2, 0]])
    first_only = np.array([[1.0, 0, 0], [1.0, 0, 0]], "float32")
    default = model.test_on_batch(x, labels, return_dict=True)["loss"]
    real = model.test_on_batch(x, labels, (labels != 0).astype("float32"),
                               return_dict=True)["loss"]
    chosen = model.test_on_batch(x, labels, first_only, return_dict=True)["loss"]
    logits = keras.ops.convert_to_numpy(model(x))
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean([log_p[0, 0, 4], log_p[1, 0, 6]])  # numpy, the first position only
    np.testing.assert_allclose(default, real, rtol=1e-6)
    np.testing.assert_allclose(chosen, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="translation_inputs"):
        model.test_on_batch(x)


def test_gradient_is_the_released_loss_summed_per_sentence_and_averaged_over_sentences():
    """One SGD step at rate 1 moves the output softmax by minus numpy's gradient of
    OpenNMT-py's loss (salesforce/cove @9a0d90b train.py: the non-pad targets' NLL summed,
    divided by the batch's sentences), a mean target length (here 6 / 3) times the mean's."""
    model = TranslationPretrainer(CoveBackbone(10, embedding_size=4, hidden_size=5), 12,
                                  target_embedding_dim=3, decoder_units=7)
    model.compile(optimizer=keras.optimizers.SGD(1.0))
    x = {"encoder_token_ids": np.array([[1, 2, 3], [4, 5, 0], [6, 0, 0]]),
         "encoder_padding_mask": np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]]),
         "decoder_token_ids": np.array([[1, 4, 5], [1, 6, 0], [1, 0, 0]]),
         "decoder_padding_mask": np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]])}
    labels = np.array([[4, 5, 2], [6, 2, 0], [2, 0, 0]])
    logits = keras.ops.convert_to_numpy(model(x)).astype("float64")
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    real = (labels != 0)[..., None]
    # d/dlogits of sum over real targets of -log p[label], per sentence: p - onehot.
    d_logits = (p - np.eye(12)[labels]) * real
    released = d_logits.sum((0, 1)) / len(labels)  # the output bias' gradient
    mean_over_targets = d_logits.sum((0, 1)) / real.sum()
    bias = model.output_layer.bias
    before = keras.ops.convert_to_numpy(bias).copy()
    loss = model.train_on_batch(x, labels, return_dict=True)["loss"]
    step = before - keras.ops.convert_to_numpy(bias)
    np.testing.assert_allclose(step, released, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(step, mean_over_targets * 6 / 3, rtol=1e-4, atol=1e-7)
    assert not np.allclose(step, mean_over_targets, rtol=0.1)
    nll = -np.log(np.take_along_axis(p, labels[..., None], -1))[..., 0]
    np.testing.assert_allclose(loss, (nll * real[..., 0]).sum() / 3, rtol=1e-5)
