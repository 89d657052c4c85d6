import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data.characters import (
    ElmoCharacterIds,
    sentences_to_character_ids,
    tokens_to_character_ids,
)


def expected(byte_values, length=50):
    """allennlp ELMoCharacterMapper by hand: [bow, bytes..., eow, pad...] + 1."""
    row = [260] * length
    row[0] = 258
    row[1 : len(byte_values) + 1] = byte_values
    row[len(byte_values) + 1] = 259
    return np.array(row) + 1


def test_hand_checked_words():
    ids = tokens_to_character_ids(tf.constant(["cat", "é", "<S>", "</S>", ""])).numpy()
    assert ids.shape == (5, 50)
    # "cat" = bytes 99 97 116.
    np.testing.assert_array_equal(ids[0][:6], [259, 100, 98, 117, 260, 261])
    np.testing.assert_array_equal(ids[0], expected([99, 97, 116]))
    # Non-ASCII: "é" is two UTF-8 bytes, 0xC3 0xA9 = 195 169.
    np.testing.assert_array_equal(ids[1], expected([195, 169]))
    # Sentence boundaries: [bow, 256 / 257, eow, pad...] + 1.
    np.testing.assert_array_equal(ids[2][:4], [259, 257, 260, 261])
    np.testing.assert_array_equal(ids[3][:4], [259, 258, 260, 261])
    assert (ids[2][3:] == 261).all() and (ids[3][3:] == 261).all()
    # Padding token: all zeros; real tokens never contain 0.
    assert (ids[4] == 0).all() and (ids[:4] > 0).all()


def test_over_long_word_is_truncated_to_48_bytes_like_allennlp():
    word = "x" * 47 + "é" + "tail"  # 53 bytes: the cut splits "é" as allennlp does
    ids = tokens_to_character_ids(tf.constant([word])).numpy()[0]
    encoded = list(word.encode("utf-8"))[:48]
    np.testing.assert_array_equal(ids, expected(encoded))
    assert ids[49] == 260  # end-of-word in the last position
    with pytest.raises(tf.errors.InvalidArgumentError, match="truncate"):
        tokens_to_character_ids(tf.constant([word]), truncate_long_words=False)


def test_sentences_add_boundaries_pad_and_work_in_tf_data():
    ds = tf.data.Dataset.from_tensor_slices(["the cat", "a"]).batch(2, drop_remainder=True)
    ds = ds.map(lambda s: sentences_to_character_ids(s, 5))
    ids = next(iter(ds)).numpy()
    assert ids.shape == (2, 5, 50)
    np.testing.assert_array_equal(ids[0, 1], expected([116, 104, 101]))
    np.testing.assert_array_equal(ids[0, 0, :3], [259, 257, 260])  # <S>
    np.testing.assert_array_equal(ids[0, 3, :3], [259, 258, 260])  # </S>
    assert (ids[0, 4] == 0).all() and (ids[1, 3:] == 0).all()
    with pytest.raises(tf.errors.InvalidArgumentError, match="sequence_length"):
        sentences_to_character_ids(tf.constant(["a b c d"]), 5)


@pytest.mark.tensorflow_only("a string keras.Input: only TensorFlow's Keras has string "
                              "tensors (sentences_to_character_ids in tf.data runs on "
                              "every backend: the test above)")
def test_preprocessing_layer_in_a_model():
    inputs = keras.Input((), dtype="string")
    outputs = ElmoCharacterIds(sequence_length=4)(inputs)
    model = keras.Model(inputs, outputs)
    got = keras.ops.convert_to_numpy(model(tf.constant(["hi there"])))
    want = sentences_to_character_ids(tf.constant(["hi there"]), 4).numpy()
    np.testing.assert_array_equal(got, want)


def test_preprocessing_layer_config_and_checks():
    layer = ElmoCharacterIds.from_config(ElmoCharacterIds(4, pre_tokenized=True).get_config())
    assert layer.pre_tokenized and layer.sequence_length == 4
    with pytest.raises(ValueError, match="max_characters_per_token"):
        ElmoCharacterIds(4, max_characters_per_token=2)


def test_only_core_tf_ops_and_saved_model_round_trip(tmp_path):
    module = tf.Module()
    module.ids = tf.function(
        lambda s: {"character_ids": sentences_to_character_ids(s, 6)},
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    graph = module.ids.get_concrete_function().graph
    op_types = {op.type for op in graph.get_operations()}
    # Every op is a core TF op (tensorflow-text ops are not in tf.raw_ops).
    assert all(hasattr(tf.raw_ops, t) for t in op_types if t not in ("Placeholder", "NoOp")), (
        sorted(t for t in op_types if not hasattr(tf.raw_ops, t))
    )
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.ids})
    loaded = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    got = loaded(tf.constant(["héllo world"]))["character_ids"].numpy()
    np.testing.assert_array_equal(got, sentences_to_character_ids(tf.constant(["héllo world"]), 6))


def test_long_sentences_continue_in_the_next_rows_in_both_data_paths():
    # bilm-tf (bilm/data.py _get_batch) trains on every word of a sentence of any
    # length; a row of 6 holds <S>, 4 words, </S>: 10 words make rows of 4, 4, 2.
    import types

    from keras_ctx.data import layouts, pipelines
    from keras_ctx.data.vocabulary import make_vocabulary

    words = [f"w{i}" for i in range(10)]
    vocabulary = make_vocabulary(words + ["short"])
    ids = {w: vocabulary.index(w) for w in vocabulary}
    want = sorted([[ids["<S>"], *[ids[w] for w in words[i:i + 4]], ids["</S>"]][:6]
                   + [0] * (4 - len(words[i:i + 4])) for i in (0, 4, 8)]
                  + [[ids["<S>"], ids["short"], ids["</S>"], 0, 0, 0]])
    documents = tf.data.Dataset.from_tensors(tf.constant([" ".join(words), "short"]))
    streamed = next(iter(pipelines.bilm_dataset(documents, vocabulary, 4, 6)))
    assert sorted(streamed["token_ids"].numpy().tolist()) == want
    run = types.SimpleNamespace(batch_size=4, sequence_length=6)
    layout = layouts.bilm_layout(vocabulary, run)
    records = tf.data.Dataset.from_tensor_slices({"sentence": [" ".join(words), "short"]})
    prepared = next(iter(layout.batches(records)))
    assert sorted(prepared["token_ids"].numpy().tolist()) == want
    assert prepared["character_ids"].shape[:2] == (4, 6)
