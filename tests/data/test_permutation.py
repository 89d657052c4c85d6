import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data.permutation import permutation_masks, sample_permutation
from keras_ctx.data.xlnet_stream import text_stream
from tests.data.word_boundaries_reference import runs


def _np(features):
    return {name: value.numpy() for name, value in features.items()}


def _check_row(tokens, real, f, num_predict, k):
    """Checks one sequence's features against their definition, by loops."""
    length = len(tokens)
    order = f["factorization_order"]
    assert sorted(order) == list(range(length))  # a permutation of the positions
    rank = np.argsort(order)
    n_real = int(real.sum())
    n_targets = min(n_real // k, num_predict)
    # Exactly the last 1/K of the order is predicted, never padding.
    targets = set(order[length - n_targets:].tolist())
    assert all(real[p] for p in targets)
    assert all(not real[p] for p in order[:length - n_real])  # padding first
    # target_mapping: one-hot rows for the targets (position order), zero rows after.
    mapping = f["target_mapping"]
    assert set(np.unique(mapping)) <= {0.0, 1.0}
    want_rows = [1.0] * n_targets + [0.0] * (num_predict - n_targets)
    np.testing.assert_array_equal(mapping.sum(1), want_rows)
    positions = mapping[:n_targets].argmax(1)
    assert positions.tolist() == sorted(targets)
    np.testing.assert_array_equal(f["target_ids"][:n_targets], tokens[positions])
    np.testing.assert_array_equal(f["target_weights"], mapping.sum(1))
    # perm_mask (1 = may not attend): the context sees the context; target z_t
    # sees the context and the targets before it in the order.
    for i in range(length):
        for j in range(length):
            if j not in targets:
                visible = True
            else:
                visible = i in targets and rank[j] < rank[i]
            assert f["perm_mask"][i, j] == (0 if visible else 1), (i, j)


@pytest.mark.parametrize("span_based", [False, True])
def test_masks_consistent_with_the_sampled_order(span_based):
    rng = np.random.default_rng(0)
    length, k = 18, 6
    tokens = rng.integers(1, 100, (6, length)).astype("int32")
    padding = np.ones_like(tokens)
    padding[3, 11:] = 0  # 11 real tokens: 1 target
    padding[4, :] = np.array([0] * 4 + [1] * 14)  # left padding: 2 targets
    padding[5, 4:] = 0  # 4 real tokens: no target
    features = _np(sample_permutation(tokens, padding, span_based=span_based, seed=1))
    assert features["perm_mask"].shape == (6, length, length)
    assert features["target_mapping"].shape == (6, length // k, length)
    assert features["target_weights"].sum(1).tolist() == [3, 3, 3, 1, 2, 0]
    for row in range(6):
        _check_row(tokens[row], padding[row],
                   {name: value[row] for name, value in features.items()}, length // k, k)
    # Unbatched input gives unbatched features, with the same rules.
    single = _np(sample_permutation(tokens[0], span_based=span_based, seed=2))
    assert single["perm_mask"].shape == (length, length)
    _check_row(tokens[0], np.ones(length), single, length // k, k)


def test_targets_uniform_and_spans_longer():
    batch, length = 400, 60
    tokens = np.tile(np.arange(length, dtype="int32"), (batch, 1))
    plain = _np(sample_permutation(tokens, seed=3))
    spans = _np(sample_permutation(tokens, span_based=True, seed=4))
    for features in (plain, spans):
        is_target = features["target_mapping"].sum(1)  # (batch, length)
        assert (is_target.sum(1) == length // 6).all()
    # Plain: every position a target 1/6 of the time (400 draws, sd ~ 0.019).
    frequency = plain["target_mapping"].sum(1).mean(0)
    assert np.abs(frequency - 1 / 6).max() < 0.08
    assert abs(frequency.mean() - 1 / 6) < 1e-6
    # Span-based targets come in runs (XLNet's n-grams, E[n] = 2.19 for n <= 5).
    plain_runs = np.mean([r for row in plain["target_mapping"].sum(1) for r in runs(row)])
    span_runs = np.mean([r for row in spans["target_mapping"].sum(1) for r in runs(row)])
    assert plain_runs < 1.35 < 1.7 < span_runs


def test_text_stream_rows_continue():
    batch, length = 3, 5
    docs = [np.arange(100 * d, 100 * d + 4 + 3 * d, dtype="int32") for d in range(12)]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(docs), output_signature=tf.TensorSpec((None,), tf.int32)
    )
    batches = list(text_stream(dataset, length, batch, separator_id=-1).as_numpy_iterator())
    assert batches and all(b["token_ids"].shape == (batch, length) for b in batches)
    streams = [np.concatenate([np.append(d, -1) for d in docs[row::batch]])
               for row in range(batch)]
    # The streams end together, when the shortest one runs out.
    assert len(batches) == min(len(s) for s in streams) // length
    for row in range(batch):
        got = np.concatenate([b["token_ids"][row] for b in batches])
        np.testing.assert_array_equal(got, streams[row][:len(got)])
    assert all(b["padding_mask"].all() and not b["segment_ids"].any() for b in batches)

    plm = permutation_masks(text_stream(dataset, 12, 2), seed=0)
    element = next(iter(plm))
    assert element["perm_mask"].shape == (2, 12, 12)
    assert element["target_mapping"].shape == (2, 2, 12)
    np.testing.assert_array_equal(element["target_weights"].numpy(), np.ones((2, 2)))


def test_permutation_masks_on_plain_tensors():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(48, dtype="int32").reshape(4, 12))
    element = next(iter(permutation_masks(dataset, seed=0)))
    assert set(element) >= {"token_ids", "padding_mask", "segment_ids", "perm_mask",
                            "target_mapping", "target_ids", "target_weights"}
    assert element["perm_mask"].shape == (12, 12)


def test_bad_inputs():
    with pytest.raises(ValueError, match="k"):
        sample_permutation(np.arange(12), k=1)
    with pytest.raises(ValueError, match="at least 6 tokens"):
        sample_permutation(np.arange(4))
    with pytest.raises(ValueError, match="num_predict"):
        sample_permutation(np.arange(12), num_predict=13)
    with pytest.raises(ValueError, match="1-D integer token id"):
        text_stream(tf.data.Dataset.from_tensor_slices(["a b"]), 4, 2)
    with pytest.raises(ValueError, match="static length"):
        permutation_masks(
            tf.data.Dataset.from_generator(
                lambda: iter([np.arange(7)]), output_signature=tf.TensorSpec((None,), tf.int64)
            )
        )


def test_seeded_sampling_is_reproducible():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(240, dtype="int32").reshape(20, 12))

    def orders(seed, span_based=False):
        data = permutation_masks(dataset, seed=seed, span_based=span_based)
        return np.stack([e["factorization_order"] for e in data.as_numpy_iterator()])

    np.testing.assert_array_equal(orders(7), orders(7))
    np.testing.assert_array_equal(orders(7, True), orders(7, True))
    assert (orders(7) != orders(8)).any()
    assert len({tuple(row) for row in orders(7)}) == 20  # a fresh order per element
    same = sample_permutation(np.arange(12), seed=3)["factorization_order"]
    np.testing.assert_array_equal(same, sample_permutation(np.arange(12), seed=3)["factorization_order"])


# ---------------------------------------------------------------- XLNet's released data
from keras_ctx.data import permutation, xlnet_stream  # noqa: E402


class _Draws:
    """A stand-in numpy Generator that returns hand-chosen draws, in order."""

    def __init__(self, random=(), choice=(), integers=()):
        self.draws = {"random": list(random), "choice": list(choice),
                      "integers": list(integers)}

    def random(self):
        return self.draws["random"].pop(0)

    def choice(self, options, p=None):
        value = self.draws["choice"].pop(0)
        assert value in (range(options) if isinstance(options, int) else list(options))
        return value

    def integers(self, low, high=None):
        low, high = (0, low) if high is None else (low, high)
        value = self.draws["integers"].pop(0)
        assert low <= value < high
        return value


# Sentences [0..3) [3..5) [5..9) [9..12) [12..17) [17..20) (XLNet's alternating sent_ids).
DATA = np.arange(20)
SENTENCES = np.array([0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1], bool)


def test_split_a_and_b_by_hand():
    # total 8 from 0: the sentence ends before 8 tokens are 3 and 5; A+B ends at 9.
    # Continuation (draw 0.7 >= 0.5), cut at 5: A = 0..4, B = 5..8 -> 9 tokens;
    # the longer, A, loses its last token.
    a, b, continuation = xlnet_stream.split_a_and_b(
        DATA, SENTENCES, 0, 8, _Draws(random=[0.7], choice=[5]))
    assert continuation and a.tolist() == [0, 1, 2, 3] and b.tolist() == [5, 6, 7, 8]
    # Random B (draw 0.2), cut at 3: B needs 8 - 3 = 5 tokens from 13, widened to
    # whole sentences 12..18, then cut at its end to 5 tokens.
    a, b, continuation = xlnet_stream.split_a_and_b(
        DATA, SENTENCES, 0, 8, _Draws(random=[0.2], choice=[3], integers=[13]))
    assert not continuation and a.tolist() == [0, 1, 2] and b.tolist() == [12, 13, 14, 15, 16]
    # No sentence end within 4 tokens from 12: A is 12..16, B must be random: one
    # token from 0, widened to its sentence 0..2; then the longer side loses
    # its last token in turn (B on ties) down to 4 tokens.
    a, b, continuation = xlnet_stream.split_a_and_b(DATA, SENTENCES, 12, 4, _Draws(integers=[0]))
    assert not continuation and a.tolist() == [12, 13] and b.tolist() == [0, 1]
    assert xlnet_stream.split_a_and_b(DATA, SENTENCES, 12, 8, _Draws()) is None


def test_span_mask_by_hand():
    starts = np.ones(20, bool)
    starts[14] = False  # a word-internal piece
    # n = 2 (choice 1) in a context of 12, 2 tokens in: positions 2, 3; the next
    # context starts at 2 + 2 + 12 - 2 = 14; n = 3, 0 tokens in: 14 is inside a
    # word, so the span starts at 15.
    draws = dict(choice=[1, 2], integers=[2, 0])
    mask = xlnet_stream.span_mask(np.arange(20), 5, _Draws(**draws), starts)
    assert np.flatnonzero(mask).tolist() == [2, 3, 15, 16, 17]
    # The goal cuts the last span; random single positions top it up.
    mask = xlnet_stream.span_mask(np.arange(20), 3, _Draws(choice=[1, 2], integers=[2, 0]), starts)
    assert np.flatnonzero(mask).tolist() == [2, 3, 15]
    mask = xlnet_stream.span_mask(np.arange(20), 7, _Draws(choice=[1, 2], integers=[2, 0, 3, 9, 0]),
                                 starts)
    assert np.flatnonzero(mask).tolist() == [0, 2, 3, 9, 15, 16, 17]
    # Backward rows are sampled on the text in reading order.
    back = xlnet_stream.span_mask(np.arange(20)[::-1], 5, _Draws(**draws), starts, reverse=True)
    np.testing.assert_array_equal(back, mask_forward := xlnet_stream.span_mask(
        np.arange(20), 5, _Draws(**draws), starts)[::-1])
    assert mask_forward.sum() == 5


def _documents(num_docs=30, seed=0, start=10):
    """Documents of 2-6 sentences whose token ids count up from `start` (stream positions)."""
    rng = np.random.default_rng(seed)
    docs, next_id = [], start
    for _ in range(num_docs):
        sentences = []
        for _ in range(rng.integers(2, 7)):
            size = int(rng.integers(2, 8))
            sentences.append(list(range(next_id, next_id + size)))
            next_id += size
        docs.append(sentences)
    return docs


def _dataset(docs):
    return tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in docs),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, 1))


SEP, CLS = 4, 3


def test_two_segment_layout_and_memory_continuity():
    docs = _documents()
    stream = np.concatenate([np.concatenate(d) for d in docs])  # no <eod>
    batch, length, reuse = 4, 24, 8
    batches = list(xlnet_stream.two_segment_stream(
        _dataset(docs), length, batch, SEP, CLS, reuse_len=reuse, bi_data=True,
        num_replicas=2, seed=3).as_numpy_iterator())
    assert len(batches) > 3
    # bi_data, 2 replicas: rows [f0, b0, f1, b1] (XLNet: per core, forward half first).
    rows = len(stream) // 2
    forward = stream[:2 * rows].reshape(2, rows)
    streams = [forward[0], forward[0][::-1], forward[1], forward[1][::-1]]
    for b in batches:
        np.testing.assert_array_equal(b["is_backward"], [0, 1, 0, 1])
    continuation = []
    for s, b in enumerate(batches):
        for row in range(batch):
            tokens, segments = b["token_ids"][row], b["segment_ids"][row]
            # The reuse part continues the previous batch's (what the memory holds).
            np.testing.assert_array_equal(tokens[:reuse], streams[row][s * reuse:(s + 1) * reuse])
            first_sep = reuse + int(np.flatnonzero(tokens[reuse:] == SEP)[0])
            assert tokens[-2] == SEP and tokens[-1] == CLS
            # XLNet's seg_id: 0 through A's <sep>, 1 for B and its <sep>, 2 for <cls>.
            want = [0] * (first_sep + 1) + [1] * (length - first_sep - 2) + [2]
            np.testing.assert_array_equal(segments, want)
            a, bb = tokens[reuse:first_sep], tokens[first_sep + 1:-2]
            # A continues the reuse part; B is a run of the same row.
            start = (s + 1) * reuse
            np.testing.assert_array_equal(a, streams[row][start:start + len(a)])
            where = int(np.flatnonzero(streams[row] == bb[0])[0])
            np.testing.assert_array_equal(bb, streams[row][where:where + len(bb)])
            if b["is_continuation"][row]:
                assert start + len(a) <= where < start + length - reuse - 3
            continuation.append(b["is_continuation"][row])
            assert b["is_masked"][row, :reuse].sum() == 2  # 85/512 of 24 = 3: 2 + 1
            assert b["is_masked"][row, reuse:].sum() == 1
    # B follows A half the time (fewer when there is no sentence end to cut at).
    assert 0.2 < np.mean(continuation) < 0.6


def test_two_segment_features_train_the_different_segment_encoding():
    from keras_ctx.models.xlnet.backbone import xlnet_attention_inputs

    docs = _documents(60, seed=1)
    length, reuse = 32, 16
    data = permutation.permutation_masks(
        xlnet_stream.two_segment_stream(_dataset(docs), length, 4, SEP, CLS, seed=0),
        num_predict=5, functional_ids=(SEP, CLS), reuse_len=reuse, seed=0)
    element = next(data.as_numpy_iterator())
    _, _, segment = xlnet_attention_inputs(element["padding_mask"], element["segment_ids"],
                                           memory_length=6)
    segment = np.asarray(segment)
    assert segment.any() and not segment.all()  # both values of the relative encoding
    assert 0.2 < segment.mean() < 0.7
    # <sep> and <cls> are never predicted; every target is a masked position.
    positions = element["target_mapping"].argmax(-1)
    for row in range(4):
        real = positions[row][element["target_weights"][row] > 0]
        assert not np.isin(element["token_ids"][row, real], [SEP, CLS]).any()
        assert element["is_masked"][row, real].all()
        np.testing.assert_array_equal(element["target_ids"][row][:len(real)],
                                      element["token_ids"][row, real])


def _local_perm_reference(order, is_target, functional, reuse_len):
    """i may NOT attend j (XLNet _local_perm + get_dataset), by loops, from the order z."""
    length = len(order)
    step = np.empty(length, int)
    step[order] = np.arange(length)
    ordered = is_target | functional
    part = np.arange(length) >= reuse_len
    hidden = np.zeros((length, length), int)
    for i in range(length):
        for j in range(length):
            if part[i] != part[j]:
                hidden[i, j] = part[j]  # the reuse part never sees the rest
            elif not ordered[j]:
                hidden[i, j] = 0  # context: seen by everyone
            elif not ordered[i]:
                hidden[i, j] = 1  # context sees no target or functional token
            elif is_target[i]:
                hidden[i, j] = step[j] >= step[i]
            else:
                hidden[i, j] = step[j] > step[i]
    return hidden


def test_local_perm_masks_match_a_loop_reference():
    rng = np.random.default_rng(5)
    length, reuse = 16, 8
    tokens = rng.integers(10, 40, (6, length)).astype("int32")
    tokens[:, 11], tokens[:, 14], tokens[:, 15] = SEP, SEP, CLS
    is_masked = rng.random((6, length)) < 0.4
    is_masked[:, 11] = True  # a masked <sep> is not a target
    f = _np(permutation.sample_permutation(
        tokens, num_predict=length, seed=4, is_masked=is_masked, functional_ids=(SEP, CLS),
        reuse_len=reuse))
    for row in range(6):
        functional = np.isin(tokens[row], [SEP, CLS])
        is_target = is_masked[row] & ~functional
        assert f["target_weights"][row].sum() == is_target.sum()
        want = _local_perm_reference(f["factorization_order"][row], is_target, functional,
                                     reuse)
        np.testing.assert_array_equal(f["perm_mask"][row], want)
    # perm_size: the order is the same permutation of perm_size slots in every block.
    f = _np(permutation.sample_permutation(
        tokens, num_predict=length, seed=5, is_masked=np.ones_like(tokens, bool),
        reuse_len=reuse, perm_size=4))
    for order in f["factorization_order"]:
        slots = order.reshape(4, 4)  # (part, block) x slot order
        assert (slots // 4 == np.arange(4)[:, None]).all()  # blocks in turn
        assert len({tuple(block % 4) for block in slots[:2]}) == 1  # reuse part
        assert len({tuple(block % 4) for block in slots[2:]}) == 1  # the rest
    with pytest.raises(ValueError, match="perm_size"):
        permutation.sample_permutation(tokens, reuse_len=8, perm_size=3, num_predict=2)
    with pytest.raises(ValueError, match="reuse_len"):
        permutation.sample_permutation(tokens, reuse_len=16)


def test_two_segment_stream_bad_inputs():
    docs = _dataset(_documents(4))
    with pytest.raises(ValueError, match="reuse_len"):
        xlnet_stream.two_segment_stream(docs, 24, 4, SEP, CLS, reuse_len=21)
    with pytest.raises(ValueError, match="multiple of 4"):
        xlnet_stream.two_segment_stream(docs, 24, 6, SEP, CLS, num_replicas=2)
    with pytest.raises(ValueError, match="ragged"):
        xlnet_stream.two_segment_stream(tf.data.Dataset.from_tensor_slices([[1, 2]]), 24, 4,
                                       SEP, CLS)
    with pytest.raises(ValueError, match="num_predict"):
        xlnet_stream.two_segment_stream(docs, 24, 4, SEP, CLS, reuse_len=4, num_predict=20)
    tiny = xlnet_stream.two_segment_stream(_dataset(_documents(1)), 64, 4, SEP, CLS)
    with pytest.raises(Exception, match="no batch"):
        list(tiny.as_numpy_iterator())


def test_xlnet_recipe_uses_the_released_settings():
    from keras_ctx import families

    # zihangdai/xlnet: data_utils.py flags num_predict=85 (of seq_len 512),
    # mask_alpha=6, mask_beta=1, reuse_len=256; README: perm_size=256.
    assert (xlnet_stream.default_num_predict(512), xlnet_stream.MASK_ALPHA,
            xlnet_stream.MASK_BETA, xlnet_stream.default_reuse_len(512)) == (85, 6, 1, 256)
    family = families.get("xlnet")
    rng = np.random.default_rng(0)
    words = "The river bank was Steep and the Money in the bank was safe on Monday".split()
    docs = [[" ".join(rng.choice(words, rng.integers(5, 10))) + "."
             for _ in range(rng.integers(3, 6))] for _ in range(30)]
    documents = tf.data.Dataset.from_generator(
        lambda: iter(docs), output_signature=tf.TensorSpec((None,), tf.string))
    tokenizer = family.train_tokenizer(documents.unbatch(), 300)
    # SentencePiece as XLNet's spm_train, reading text as its prepro_utils.py (cased).
    assert type(tokenizer).__name__ == "AlbertSentencePieceTokenizer"
    assert not tokenizer.lowercase and tokenizer.quotes and not tokenizer.keep_accents
    pieces = [tokenizer.id_to_token(i) for i in range(tokenizer.vocabulary_size())]
    assert "<eod>" in pieces and any(p != p.lower() for p in pieces)  # cased
    run = families.Run("xlnet-base", batch_size=4, sequence_length=64, vocabulary_size=300)
    element = next(family.dataset(documents, tokenizer, run).as_numpy_iterator())
    sep, cls = tokenizer.token_to_id("[SEP]"), tokenizer.token_to_id("[CLS]")
    assert (element["token_ids"][:, -1] == cls).all() and (element["token_ids"][:, -2] == sep).all()
    assert (element["segment_ids"][:, -1] == 2).all() and (element["segment_ids"][:, :32] == 0).all()
    assert (element["is_masked"].sum(1) == xlnet_stream.default_num_predict(64)).all()  # 10
    assert (element["is_masked"][:, :32].sum(1) == 5).all()
    assert element["target_mapping"].shape == (4, 10, 64)
    np.testing.assert_array_equal(element["is_backward"], [0, 0, 1, 1])
    assert (element["perm_mask"][:, :32, 32:] == 1).all()  # the reuse part sees no further
    assert family.pretrainer(from_preset_tiny(tokenizer), tokenizer, run).reuse_len == 32


def from_preset_tiny(tokenizer):
    from keras_ctx.models import XLNetBackbone

    return XLNetBackbone(tokenizer.vocabulary_size(), 1, 2, 16, 32)


def test_eod_joins_the_documents_last_sentence():
    # data_utils.py flips sent_id back for the blank line's <eod>: it takes the id
    # of the document's last sentence, so no cut point falls before it.
    docs = [[np.array([10, 11]), np.array([12])], [np.array([13, 14, 15])]]
    data, ids = xlnet_stream.sentence_stream(docs, eod_id=7)
    assert data.tolist() == [10, 11, 12, 7, 13, 14, 15, 7]
    assert ids.astype(int).tolist() == [0, 0, 1, 1, 0, 0, 0, 0]
    # The streamed path cuts from the same stream (one implementation).
    batch = next(xlnet_stream.two_segment_stream(
        _dataset([[[10, 11], [12]], [[13, 14, 15]]] * 3), 8, 1, SEP, CLS, reuse_len=2,
        num_predict=2, bi_data=False, eod_id=7, seed=0).as_numpy_iterator())
    assert batch["token_ids"][0, :2].tolist() == [10, 11]
    for row in batch["token_ids"]:  # neither A nor B starts with <eod>
        first_sep = 2 + int(np.flatnonzero(row[2:] == SEP)[0])
        assert row[2] != 7 and row[first_sep + 1] != 7


def test_split_a_and_b_needs_a_token_after_the_row_end():
    # data_utils.py's extend_target: A or B may not end the row (its last token
    # needs a target). From 0 of 10 tokens, one sentence end at 6: continuation
    # A = 0..5, B = 6..9; A loses 2 tokens to fit 8, B still ends the row.
    data, ids = np.arange(10), np.array([0] * 6 + [1] * 4, bool)
    assert xlnet_stream.split_a_and_b(data, ids, 0, 8, _Draws(random=[0.7], choice=[6])) is None
    a, b, _ = xlnet_stream.split_a_and_b(np.arange(11), np.r_[ids, False], 0, 8,
                                         _Draws(random=[0.7], choice=[6]))
    assert a.tolist() == [0, 1, 2, 3, 4, 5][:len(a)] and len(a) + len(b) == 8
