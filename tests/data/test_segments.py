import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import segments

CLS, SEP, PAD, DOC_SEP = 2, 3, 0, 1


def _counting_documents(count=60, seed=0):
    """Documents of globally unique, increasing ids: membership and order are checkable."""
    rng = np.random.default_rng(seed)
    docs, next_id, owner = [], 10, {}
    for d in range(count):
        sentences = []
        for _ in range(int(rng.integers(1, 7))):
            length = int(rng.integers(1, 9))
            sentence = list(range(next_id, next_id + length))
            for t in sentence:
                owner[t] = d
            next_id += length
            sentences.append(sentence)
        docs.append(sentences)
    return docs, owner


def _ragged(docs):
    return tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in docs),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, ragged_rank=1))


def _split_example(example):
    n = example["padding_mask"].sum()
    ids = example["token_ids"][:n]
    assert ids[0] == CLS and ids[-1] == SEP
    assert (example["token_ids"][n:] == PAD).all() and (example["padding_mask"][n:] == 0).all()
    first_sep = int(np.where(ids == SEP)[0][0])
    a, b = ids[1:first_sep], ids[first_sep + 1:-1]
    want_segments = np.r_[np.zeros(first_sep + 1), np.ones(len(b) + 1)]
    np.testing.assert_array_equal(example["segment_ids"][:n], want_segments)
    return a, b


def _contiguous(tokens):
    return len(tokens) > 0 and (np.diff(tokens) == 1).all()


def test_nsp_pairs_are_correct():
    docs, owner = _counting_documents(600)
    examples = list(segments.nsp_pairs(_ragged(docs), 32, CLS, SEP, PAD,
                                       seed=1).as_numpy_iterator())
    labels = np.array([e["next_sentence_labels"] for e in examples])
    assert len(labels) > 300
    truncated = 0
    for example, label in zip(examples, labels):
        a, b = _split_example(example)
        assert len(a) and len(b) and len(a) + len(b) <= 29
        doc_a = {owner[t] for t in a}
        doc_b = {owner[t] for t in b}
        assert len(doc_a) == 1 and len(doc_b) == 1
        if label == 0:
            assert doc_a == doc_b
            if a[-1] + 1 == b[0]:
                continue
            truncated += 1  # BERT's truncate_seq_pair cut the join
        else:
            assert doc_a != doc_b, "a NotNext segment came from the same document"
    assert truncated < 0.1 * len(labels)


def test_sop_negatives_are_swapped_positives_or_one_sentence_with_a_random_b():
    docs, owner = _counting_documents(200)
    sentences = {tuple(s) for d in docs for s in d}
    examples = list(segments.sop_pairs(_ragged(docs), 64, CLS, SEP, PAD,
                                       seed=2).as_numpy_iterator())
    labels = np.array([e["sentence_order_labels"] for e in examples])
    swapped = 0
    for example, label in zip(examples, labels):
        a, b = _split_example(example)
        if owner[a[0]] != owner[b[0]]:
            # google-research/albert: a chunk of one sentence gets a random B, label 1.
            assert label == 1 and tuple(a) in sentences and len({owner[t] for t in b}) == 1
            continue
        assert {owner[t] for t in np.r_[a, b]} == {owner[a[0]]}
        # Positive: A then B, one contiguous run. Negative: the run swapped.
        first, second = (a, b) if label == 0 else (b, a)
        assert _contiguous(np.r_[first, second])
        swapped += label
    # Chunks of several sentences: swapped with probability 1/2, within 4 standard errors.
    pairs = len(labels) - (labels.sum() - swapped)
    assert abs(swapped / pairs - 0.5) < 4 * np.sqrt(0.25 / pairs)


def test_pairs_resample_each_epoch_unless_static():
    docs, _ = _counting_documents(50)
    dynamic = segments.nsp_pairs(_ragged(docs), 32, CLS, SEP, PAD, seed=0)
    one, two = (list(dynamic.take(20).as_numpy_iterator()) for _ in range(2))
    assert any((x["token_ids"] != y["token_ids"]).any() for x, y in zip(one, two))
    static = segments.nsp_pairs(_ragged(docs), 32, CLS, SEP, PAD, seed=0, static=True)
    one, two = (list(static.take(20).as_numpy_iterator()) for _ in range(2))
    assert all((x["token_ids"] == y["token_ids"]).all() for x, y in zip(one, two))


@pytest.mark.parametrize("mode", ["full_sentences", "doc_sentences"])
def test_packing_keeps_every_token_in_order(mode):
    docs, owner = _counting_documents(40)
    examples = list(segments.pack_sentences(_ragged(docs), 24, CLS, SEP, PAD, mode=mode,
                                            document_separator_id=DOC_SEP, shuffle=False)
                    .as_numpy_iterator())
    stream = []
    for example in examples:
        n = example["padding_mask"].sum()
        ids = example["token_ids"][:n]
        assert ids[0] == CLS and ids[-1] == SEP and n <= 24
        assert (example["segment_ids"] == 0).all()
        body = ids[1:-1]
        words = body[body != DOC_SEP]
        if mode == "doc_sentences":
            assert DOC_SEP not in body and len({owner[t] for t in words}) == 1
        else:
            # Crossing a document boundary is marked by the separator.
            for left, right in zip(body[:-1], body[1:]):
                if left != DOC_SEP and right != DOC_SEP:
                    assert owner[left] == owner[right]
        stream.extend(words)
    want = [t for d in docs for s in d for t in s]
    np.testing.assert_array_equal(stream, want)
    if mode == "full_sentences":
        # Packing fills sequences: on average well over half full.
        assert np.mean([e["padding_mask"].sum() for e in examples]) > 0.75 * 24


def test_long_sentence_is_split_not_dropped():
    docs = [[list(range(10, 60))]]
    examples = list(segments.pack_sentences(_ragged(docs), 16, CLS, SEP, PAD)
                    .as_numpy_iterator())
    body = np.concatenate([e["token_ids"][1:e["padding_mask"].sum() - 1] for e in examples])
    np.testing.assert_array_equal(body, np.arange(10, 60))


def test_errors_are_clear():
    with pytest.raises(ValueError, match="no usable document"):
        segments.nsp_pairs(_ragged([[[]], [[]]]), 32, CLS, SEP)
    with pytest.raises(ValueError, match="two documents"):
        segments.nsp_pairs(_ragged([[[10, 11], [12]]]), 32, CLS, SEP)
    with pytest.raises(ValueError, match="sequence_length"):
        segments.sop_pairs(_ragged([[[10, 11], [12]]]), 3, CLS, SEP)
    with pytest.raises(ValueError, match="mode"):
        segments.pack_sentences(_ragged([[[10]]]), 8, CLS, SEP, mode="half_sentences")


# google-research/bert create_pretraining_data.py (eedf571), rule by rule on hand-made documents.

def _segment_instances(docs, max_tokens=29, short_seq_prob=0.0, seed=0, kind="nsp"):
    docs = [[np.asarray(s, np.int32) for s in d] for d in docs]
    instances = segments.nsp_instances if kind == "nsp" else segments.sop_instances
    return list(instances(docs, max_tokens, short_seq_prob, np.random.default_rng(seed)))


@pytest.mark.parametrize("kind", ["nsp", "sop"])
def test_one_sentence_documents_are_whole_a_with_a_random_b(kind):
    # A chunk of one sentence: A is the whole sentence, B whole sentences of another
    # document, label 1 ("is_random_next = True"); never a cut inside the sentence.
    docs = [[list(range(100 * d, 100 * d + 4 + d % 5))] for d in range(30)]
    owner = {t: d for d, doc in enumerate(docs) for t in doc[0]}
    for seed in range(3):
        instances = _segment_instances(docs, seed=seed, kind=kind)
        assert len(instances) == len(docs)  # one instance per document, none dropped
        assert sorted(tuple(a) for a, _, _ in instances) == sorted(tuple(d[0]) for d in docs)
        for a, b, label in instances:
            assert label == 1
            assert owner[b[0]] != owner[a[0]]
            assert list(b) == docs[owner[b[0]]][0]


def test_nsp_puts_back_the_sentences_a_random_b_left_unused():
    # Three 5-token sentences per document fit one chunk (target 100); when B is
    # drawn from another document, the sentences after A start the next chunk, so
    # every sentence is an A, or the B of an IsNext pair, of its own document.
    docs = [[list(range(100 * d + 10 * s, 100 * d + 10 * s + 5)) for s in range(3)]
            for d in range(60)]
    instances = _segment_instances(docs, max_tokens=100)
    labels = [label for _, _, label in instances]
    assert 0 < sum(labels) < len(labels)
    used = {int(t) for a, b, label in instances for t in (a if label else np.r_[a, b])}
    assert used == {t for d in docs for s in d for t in s}
    # A document gives one instance, plus one more for each random B.
    assert len(instances) == len(docs) + sum(labels) - sum(
        1 for a, b, label in instances if label and a[-1] % 100 >= 20)


def test_short_target_is_drawn_once_per_document_pass():
    # One-token sentences: every chunk but a document's last holds exactly the
    # pass' target length, so all the IsNext pairs of one pass have one length.
    docs = [[[1000 * d + i] for i in range(120)] for d in range(40)]
    instances = _segment_instances(docs, max_tokens=29, short_seq_prob=0.5, seed=4)
    lengths = {}
    for a, b, label in instances:
        if label == 0 and b[-1] % 1000 != 119:
            lengths.setdefault(a[0] // 1000, set()).add(len(a) + len(b))
    assert len(lengths) > 30
    assert all(len(found) == 1 for found in lengths.values())
    # Half of the passes are short (randint(2, max_tokens)), half full.
    full = sum(found == {29} for found in lengths.values())
    assert 0.2 * len(lengths) < full < 0.8 * len(lengths)


def test_two_segment_examples_as_build_pretraining_dataset():
    # google-research/electra build_pretraining_dataset.py: a document's sentences up to
    # the target length, A up to (target - 3) // 2 tokens, B the rest; one segment
    # with probability 0.1; never across documents, tokens in order.
    docs = [[list(range(1000 * d + 10 * s + 10, 1000 * d + 10 * s + 20)) for s in range(12)]
            for d in range(300)]
    arrays = [[np.asarray(s, np.int32) for s in d] for d in docs]
    examples = list(segments.packed_examples(arrays, 64, CLS, SEP, PAD, mode="two_segments",
                                             rng=np.random.default_rng(0)))
    one_segment = 0
    for example in examples:
        n = example["padding_mask"].sum()
        ids = example["token_ids"][:n]
        assert ids[0] == CLS and ids[-1] == SEP and n <= 64
        body = ids[(ids != CLS) & (ids != SEP)]
        assert len({t // 1000 for t in body}) == 1 and _contiguous(body)
        seps = np.flatnonzero(ids == SEP)
        if len(seps) == 1:
            one_segment += 1
            assert (example["segment_ids"] == 0).all()
        else:
            a = ids[1:seps[0]]
            assert len(a) % 10 == 0 and len(a) <= 30  # whole sentences up to the target 30
            np.testing.assert_array_equal(example["segment_ids"][:n],
                                          np.r_[np.zeros(seps[0] + 1), np.ones(n - seps[0] - 1)])
    share = one_segment / len(examples)
    assert abs(share - 0.1) < 4 * np.sqrt(0.09 / len(examples)) + 0.02, share
    # Every sentence is used (up to the cut of A and B to 64 tokens).
    assert sum(e["padding_mask"].sum() for e in examples) > 0.8 * 300 * 120
