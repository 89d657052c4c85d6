import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import tokenizers
from keras_ctx.models import BertBackbone

WORDS = ("the model reads text and learns representations of words in context "
         "a transformer encoder attends to every token masked tokens are predicted "
         "from both directions sentences follow sentences in documents").split()


def _random_lines(lines=200, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 12)))) + "."
            for _ in range(lines)]


@pytest.fixture(scope="module")
def corpus():
    return _random_lines()


def _text(detokenized):
    text = detokenized.numpy()[0] if hasattr(detokenized, "numpy") else detokenized[0]
    return text.decode() if isinstance(text, bytes) else text


def _check_tokenizer(tokenizer, corpus, lowercase=True):
    ids = tokenizers.special_token_ids(tokenizer)
    assert len(set(ids.values())) == 5
    tokens = [list(map(int, row)) for row in tokenizer(tf.constant(corpus[:20]))]
    flat = np.concatenate(tokens)
    assert flat.max() < tokenizer.vocabulary_size()
    assert ids["unk"] not in flat, "in-vocabulary text produced unknown tokens"
    table = tokenizers.continuation_table(tokenizer)
    assert table.shape == (tokenizer.vocabulary_size(),)
    assert not table[list(ids.values())].any()
    return tokens, table


def test_wordpiece_learned_from_the_corpus(corpus):
    tokenizer = tokenizers.train_wordpiece(corpus, 120)
    tokens, table = _check_tokenizer(tokenizer, corpus)
    vocab = tokenizers.vocabulary(tokenizer)
    assert vocab[:5] == list(tokenizers.BERT_SPECIAL_TOKENS)
    assert all(table[i] == vocab[i].startswith("##") for i in range(len(vocab)))
    assert _text(tokenizer.detokenize(tokens[:1])).replace(" .", ".") == corpus[0]


def test_uncased_wordpiece_strips_accents_as_it_learned_saved_and_loaded(tmp_path):
    # The pieces are learned from lower-cased, accent-stripped text (BERT's uncased
    # BasicTokenizer): the tokenizer must read text the same way, else "Café" is
    # [UNK] (google-research/bert tokenization.py: _run_strip_accents when lower).
    lines = ["the cafe serves a naive resume", "a cafe and a resume"] * 20
    tokenizer = tokenizers.train_wordpiece(lines + ["Café naïve Résumé"], 80)
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    for loaded in (tokenizer, tokenizers.load_tokenizer(str(tmp_path))):
        accented = [int(i) for i in loaded("Café naïve Résumé")]
        assert accented == [int(i) for i in loaded("cafe naive resume")]
        assert tokenizers.special_token_ids(loaded)["unk"] not in accented
    cased = tokenizers.train_wordpiece(lines + ["Café"], 80, lowercase=False)
    assert [int(i) for i in cased("Café")] != [int(i) for i in cased("cafe")]


def test_byte_level_bpe_learned_from_the_corpus(corpus):
    tokenizer = tokenizers.train_byte_level_bpe(corpus, 300)
    tokens, table = _check_tokenizer(tokenizer, corpus)
    ids = tokenizers.special_token_ids(tokenizer)
    assert (ids["cls"], ids["pad"], ids["sep"]) == (0, 1, 2)  # fairseq's <s> <pad> </s>
    assert _text(tokenizer.detokenize(tokens[:1])) == corpus[0]
    # Every word after the first begins with a "Ġ" piece (a word start).
    vocab = tokenizers.vocabulary(tokenizer)
    first_of_words = [vocab[i] for i in tokens[0] if not table[i]]
    assert len(first_of_words) >= len(corpus[0].split()) - 1


def test_byte_level_bpe_documents_tokenize_as_running_text(corpus):
    """A document's sentences give the ids of the document tokenized whole (GPT-2's
    WebText documents): a sentence after the first starts with its "Ġ" word piece."""
    tokenizer = tokenizers.train_byte_level_bpe(corpus, 300)
    document = corpus[:3]
    docs = tf.data.Dataset.from_tensor_slices([document])
    tokenized = next(iter(tokenizers.tokenize_documents(docs, tokenizer)))
    whole = [int(i) for i in tokenizer(tf.constant(" ".join(document)))]
    assert [int(i) for i in tokenized.flat_values] == whole
    assert tokenized.shape[0] == 3  # still one row per sentence
    # WordPiece has no space pieces: each sentence alone, as before.
    wordpiece = tokenizers.train_wordpiece(corpus, 120)
    pieces = next(iter(tokenizers.tokenize_documents(docs, wordpiece)))
    assert pieces.to_list()[1] == [int(i) for i in wordpiece(tf.constant(document[1]))]


def test_sentencepiece_trained_with_albert_special_ids(corpus):
    tokenizer = tokenizers.train_sentencepiece(corpus, 100)
    tokens, table = _check_tokenizer(tokenizer, corpus)
    assert tokenizers.special_token_ids(tokenizer) == {
        "pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    vocab = tokenizers.vocabulary(tokenizer)
    assert all(table[i] == (not vocab[i].startswith("\u2581")) for i in range(5, len(vocab)))


def test_tokenize_documents_and_vocabulary_mismatch(corpus):
    tokenizer = tokenizers.train_wordpiece(corpus, 120)
    docs = tf.data.Dataset.from_tensor_slices([corpus[:3]])
    tokenized = next(iter(tokenizers.tokenize_documents(docs, tokenizer)))
    assert isinstance(tokenized, tf.RaggedTensor) and tokenized.shape[0] == 3
    small = BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_size=8,
                         intermediate_size=16)
    with pytest.raises(ValueError, match="vocabulary_size="):
        tokenizers.check_vocabulary(tokenizer, small)
    with pytest.raises(ValueError, match="No text"):
        tokenizers.train_wordpiece(["", "  "], 100)


def _document_dataset(corpus, per_document=5):
    groups = [corpus[i:i + per_document] for i in range(0, len(corpus), per_document)]
    return tf.data.Dataset.from_generator(
        lambda: iter(groups), output_signature=tf.TensorSpec((None,), tf.string))


def test_raw_text_to_roberta_batches_with_byte_level_bpe(corpus):
    from keras_ctx.data import pipelines

    tokenizer = tokenizers.train_byte_level_bpe(corpus, 300)
    ids = tokenizers.special_token_ids(tokenizer)
    batch = next(iter(pipelines.roberta_dataset(_document_dataset(corpus), tokenizer, 4,
                                                sequence_length=32)))
    assert batch["token_ids"].shape == (4, 32) and "next_sentence_labels" not in batch
    original = batch["token_ids"].numpy()
    np.put_along_axis(original, batch["mask_positions"].numpy(),
                      np.where(batch["mask_weights"].numpy() > 0, batch["mask_ids"].numpy(),
                               np.take_along_axis(original, batch["mask_positions"].numpy(),
                                                  1)), 1)
    assert (original[:, 0] == ids["cls"]).all()
    lengths = batch["padding_mask"].numpy().sum(1)
    assert (original[np.arange(4), lengths - 1] == ids["sep"]).all()
    # Packing fills a sequence with consecutive sentences of one or more
    # documents (shuffled), joined byte for byte, "</s>" between documents.
    text = _text(tokenizer.detokenize([list(original[0, 1:lengths[0] - 1])]))
    for piece in text.split("</s>"):
        assert piece in "".join(corpus)


def test_raw_text_to_spanbert_batches_masks_whole_wordpiece_words(corpus):
    from keras_ctx.data import pipelines

    tokenizer = tokenizers.train_wordpiece(corpus, 120)
    table = tokenizers.continuation_table(tokenizer)
    batch = next(iter(pipelines.spanbert_dataset(_document_dataset(corpus), tokenizer, 4,
                                                 sequence_length=48)))
    positions = batch["mask_positions"].numpy()
    weights = batch["mask_weights"].numpy() > 0
    selected = np.zeros((4, 48), bool)
    for b in range(4):
        selected[b, positions[b][weights[b]]] = True
    assert selected.any()
    original = batch["token_ids"].numpy().copy()
    for b in range(4):
        original[b, positions[b][weights[b]]] = batch["mask_ids"].numpy()[b][weights[b]]
    continuing = table[original]
    previous = np.roll(selected, 1, axis=1)
    assert (selected[continuing] == previous[continuing]).all()
