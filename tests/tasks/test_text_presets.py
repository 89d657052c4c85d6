"""Text tasks from any model handle, and tf.data of strings for tagging and span QA."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.convert import from_huggingface
from keras_ctx.tasks import text
from tests import hub_caches
from tests.tasks.text_fixtures import backbone, tokenizer
from tests.handle_cases import sequence, tiny_bert

pytestmark = pytest.mark.filterwarnings("ignore:.*pooler")


def test_tasks_from_an_hf_handle_hold_its_weights_and_tokenizer(tmp_path, hf_cache):
    source = tiny_bert(tmp_path / "src")
    hub_caches.add_hf_repo(hf_cache, "tiny-org/tiny-bert", source)
    classifier = text.TextClassifier.from_preset("hf://tiny-org/tiny-bert", num_classes=3,
                                                 sequence_length=8)
    assert classifier.sequence_length == 8 and classifier.family.name == "bert"
    np.testing.assert_array_equal(sequence(classifier.backbone),
                                  sequence(from_huggingface(source)))
    # The tokenizer is the checkpoint's: "w3 w4" are ids 8, 9 of its vocab.txt.
    ids = keras.ops.convert_to_numpy(classifier.preprocessor(tf.constant(["w3 w4"]))["token_ids"])
    assert ids[0, :4].tolist() == [2, 8, 9, 3]
    assert classifier.predict(["w3 w4"]).shape == (1, 3)
    embedder = text.TextEmbedder.from_preset("hf://tiny-org/tiny-bert")
    assert embedder.sequence_length == 10  # the checkpoint's max_position_embeddings
    with pytest.raises(ValueError, match="bert-tiny is a preset name: .* no tokenizer"):
        text.TextClassifier.from_preset("bert-tiny", num_classes=2)


def test_word_classifier_takes_tf_data_of_words_as_lists_do():
    words = [["paris", "approved", "the", "loan"], ["the", "river"]]
    tags = [["LOC", "O", "O", "O"], ["O", "LOC"]]
    tagger = text.WordClassifier(backbone("bert"), tokenizer("bert"), ["O", "LOC"],
                                 sequence_length=16)
    data = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(words), tf.ragged.constant(tags))).batch(2)
    (inputs, labels, weights), = list(tagger._dataset(data))
    _, want_labels, want_weights = tagger._examples(words, tags)
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(weights, want_weights)
    listed = next(iter(tagger._dataset(words)))[0]
    for name in listed:
        np.testing.assert_array_equal(inputs[name], listed[name])
    tagger.compile(keras.optimizers.Adam(1e-2))
    tagger.fit(data.repeat(8), epochs=1, verbose=0)
    assert tagger.predict(data.map(lambda w, t: w)) == tagger.predict(words)
    with pytest.raises(TypeError, match="ragged"):
        tagger.fit(tf.data.Dataset.from_tensor_slices(["paris is"]).batch(1))


def test_question_answerer_takes_tf_data_of_strings_as_lists_do():
    qa = text.QuestionAnswerer(backbone("bert"), tokenizer("bert"), sequence_length=24)
    pairs = [("what is the capital ?", "paris is the capital of france ."),
             ("where ?", "we sat on the bank of the river .")]
    answers = [(0, "paris"), (14, "bank")]
    data = tf.data.Dataset.from_tensor_slices((
        (tf.constant([q for q, _ in pairs]), tf.constant([c for _, c in pairs])),
        (tf.constant([s for s, _ in answers]), tf.constant([a for _, a in answers])))).batch(2)
    (inputs, positions), = list(qa._dataset(data))
    (want_inputs, want_positions), = list(qa._dataset(pairs, answers))
    np.testing.assert_array_equal(positions, want_positions)
    for name in want_inputs:
        np.testing.assert_array_equal(inputs[name], want_inputs[name])
    qa.compile(keras.optimizers.Adam(1e-2))
    qa.fit(data.repeat(4), epochs=1, verbose=0)
    assert qa.predict(data.map(lambda pair, answer: pair)) == qa.predict(pairs)
