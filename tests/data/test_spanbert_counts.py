"""SpanBERT's recipe draws random replacements by the counts of the corpus it trains on
(facebookresearch/SpanBERT masking.py: `np.random.choice(tokens)` over the corpus' token
buffer), streamed (`keras-ctx pretrain`) and prepared (`keras-ctx prepare`, `--data`)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import families
from keras_ctx.common.errors import ConfigError
from keras_ctx.data import pipelines, prepare, prepared_input, token_counts, tokenizers

_WORDS = [f"word{chr(97 + i)}" for i in range(20)]


def _zipf_documents(count=300, seed=0):
    # Zipf-skewed words, so a draw by frequency and a uniform one differ.
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, len(_WORDS) + 1)
    return [[" ".join(rng.choice(_WORDS, 12, p=weights / weights.sum())) + " ."
             for _ in range(4)] for _ in range(count)]


def _reference_counts(docs, tokenizer):
    """numpy's count of every id the tokenizer gives the corpus, sentence by sentence."""
    ids = [np.asarray(tokenizer(sentence)) for doc in docs for sentence in doc]
    return np.bincount(np.concatenate(ids), minlength=tokenizer.vocabulary_size())


def _random_replacements(batches, mask_id, take):
    """(the ids random replacements put in, the masked originals) over `take` batches: a
    replacement that drew its own original cannot be seen (accounted for by the caller)."""
    drawn, originals = [], []
    for batch in batches.take(take):
        ids, positions = batch["token_ids"].numpy(), batch["mask_positions"].numpy()
        used, targets = batch["mask_weights"].numpy() > 0, batch["mask_ids"].numpy()
        now = np.take_along_axis(ids, positions, 1)
        drawn += list(now[used & (now != mask_id) & (now != targets)])
        originals += list(targets[used])
    return np.asarray(drawn), np.asarray(originals)


def _chi_square_quantile(df, z=3.09):
    """Wilson-Hilferty's chi-square quantile (z = 3.09: the 0.999 quantile)."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


@pytest.fixture(scope="module")
def corpus():
    docs = _zipf_documents()
    family = families.get("spanbert")
    documents = tf.data.Dataset.from_tensor_slices(docs)
    return docs, documents, family.train_tokenizer(documents.unbatch(), 200)


def test_the_spanbert_recipe_draws_random_replacements_by_the_corpus_counts(corpus):
    docs, documents, tokenizer = corpus
    family = families.get("spanbert")
    run = families.Run("spanbert-base", batch_size=32, sequence_length=64, vocabulary_size=200)
    mask_id = tokenizer.token_to_id("[MASK]")
    drawn, originals = _random_replacements(
        family.dataset(documents, tokenizer, run).repeat(), mask_id, take=40)
    counts = _reference_counts(docs, tokenizer)
    support = np.flatnonzero(counts)
    assert len(drawn) > 400
    # Only ids of the corpus: a uniform draw over the 73 ids puts in one outside it 70% of
    # the time (special tokens, characters and pieces the text never uses).
    assert set(drawn) <= set(support), sorted(set(drawn) - set(support))
    # A draw of id j is seen unless it replaced a j: E[seen j] ~ q_j * (masked - masked j).
    q = counts[support] / counts.sum()
    expected = q * (len(originals) - np.bincount(originals, minlength=len(counts))[support])
    expected *= len(drawn) / expected.sum()
    observed = np.bincount(drawn, minlength=len(counts))[support]
    chi_square = float(((observed - expected) ** 2 / expected).sum())
    assert chi_square < _chi_square_quantile(len(support) - 1), (chi_square, observed, expected)


def test_the_counting_pass_is_numpys_count_and_a_resumed_run_counts_the_same(corpus, tmp_path):
    # A resumed run reads its claimed tokenizer back from the run directory and its corpus
    # is fingerprinted unchanged: the streamed count (one pass, a vocabulary-sized sum) is
    # then the same, id for id.
    docs, documents, tokenizer = corpus
    vocabulary = tokenizer.vocabulary_size()
    first = token_counts.of_documents(tokenizers.tokenize_documents(documents, tokenizer),
                                      vocabulary)
    np.testing.assert_array_equal(first, _reference_counts(docs, tokenizer))
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    claimed = tokenizers.load_tokenizer(str(tmp_path))
    again = token_counts.of_documents(tokenizers.tokenize_documents(documents, claimed),
                                      vocabulary)
    np.testing.assert_array_equal(again, first)
    with pytest.raises(ConfigError, match="repeat forever here"):
        token_counts.of_documents(tokenizers.tokenize_documents(documents.repeat(), tokenizer),
                                  vocabulary)
    with pytest.raises(ConfigError, match="outside the vocabulary of 5"):
        token_counts.of_arrays([np.array([1, 7])], 5)


def _prepared_spanbert(tmp_path, docs, out="data"):
    path = tmp_path / "corpus.txt"
    if not path.exists():
        path.write_text("".join("\n".join(doc) + "\n\n" for doc in docs))
    return prepare.prepare("spanbert-base", str(path), str(tmp_path / out), sequence_length=64,
                           vocabulary_size=200, workers=1, shard_bytes=8_000, say=lambda _: None)


@pytest.mark.parametrize("bad", [7, 5, -1])
def test_an_id_outside_the_vocabulary_is_refused_by_both_counts_not_dropped(bad):
    # A vocabulary-sized bincount drops such an id silently: the counts then miss part of
    # the corpus and no error says the ids came from another tokenizer.
    rows = [[[1, 2], [3]], [[4, bad, 2]]]
    documents = tf.data.Dataset.from_tensor_slices(
        tf.ragged.constant(rows, dtype=tf.int64, ragged_rank=2))
    with pytest.raises(ConfigError, match=f"token id {bad} is outside the vocabulary of 5"):
        token_counts.of_documents(documents, 5)
    with pytest.raises(ConfigError, match=f"token id {bad} is outside the vocabulary of 5"):
        token_counts.of_arrays([np.array(ids) for doc in rows for ids in doc], 5)
    good = [[[1, 2], [3]], [[4, 0, 2]]]
    np.testing.assert_array_equal(token_counts.of_documents(
        tf.data.Dataset.from_tensor_slices(tf.ragged.constant(good, tf.int64, ragged_rank=2)),
        5), [1, 1, 2, 1, 1])


@pytest.mark.parametrize("counts", [[1, 2, -1], [1.5, 2, 3], [0, 0, 0], [1, 2], [np.nan, 1, 1],
                                    None])
def test_counts_a_user_or_a_manifest_gives_are_checked_by_one_rule(counts):
    for where in ("`token_counts`", "manifest.json"):
        with pytest.raises(ConfigError, match=f"{where} must hold one count of the corpus' "
                                              "token ids per id of the vocabulary of 3"):
            token_counts.checked(counts, 3, where)
    np.testing.assert_array_equal(token_counts.checked([0, 2.0, 3], 3), [0, 2, 3])


def test_prepared_spanbert_data_records_the_counts_and_reads_by_them(tmp_path):
    docs = _zipf_documents(120, seed=1)
    manifest = _prepared_spanbert(tmp_path, docs)
    out = str(tmp_path / "data")
    tokenizer = prepare.load_tokenizer(out)
    assert len(manifest["shards"]) >= 2  # the shards' counts are summed
    assert all(token_counts.MANIFEST_KEY not in shard for shard in manifest["shards"])
    reference = _reference_counts(docs, tokenizer)
    np.testing.assert_array_equal(manifest[token_counts.MANIFEST_KEY], reference)

    # A resumed preparation (one shard made again) records the same counts.
    os.remove(os.path.join(out, manifest["shards"][-1]["file"]))
    os.remove(os.path.join(out, "manifest.json"))
    assert _prepared_spanbert(tmp_path, docs)[token_counts.MANIFEST_KEY] == manifest[
        token_counts.MANIFEST_KEY]

    # The read side draws by the manifest's counts: only ids of the corpus come in.
    run = families.Run("spanbert-base", batch_size=16, sequence_length=64, vocabulary_size=200)
    layout = families.get("spanbert").prepared(tokenizer, run)
    reader = prepared_input.PreparedInput(out, manifest, layout, 16, worker=0, workers=1)
    drawn, _ = _random_replacements(reader.at_step(0), tokenizer.token_to_id("[MASK]"), 12)
    assert len(drawn) > 40 and set(drawn) <= set(np.flatnonzero(reference))

    # Data prepared before the counts were recorded is refused, saying what to do.
    old = {k: v for k, v in manifest.items() if k != token_counts.MANIFEST_KEY}
    with pytest.raises(ConfigError, match="prepare the data again"):
        prepared_input.PreparedInput(out, old, layout, 16, worker=0, workers=1)
    with pytest.raises(ConfigError, match="read them through PreparedInput"):
        layout.batches(tf.data.Dataset.from_tensors({"token_ids": tf.zeros(64, tf.int32)}))
    assert json.loads((tmp_path / "data" / "manifest.json").read_text())[
        token_counts.MANIFEST_KEY] == manifest[token_counts.MANIFEST_KEY]


def _spies(monkeypatch):
    """(the counting passes `of_documents` made, the counts the SpanBERT recipe got), as
    lists that grow with each call."""
    passes, got = [], []
    count, of_corpus = token_counts.of_documents, pipelines.counts_of

    def counted(documents, vocabulary_size):
        passes.append(vocabulary_size)
        return count(documents, vocabulary_size)

    monkeypatch.setattr(token_counts, "of_documents", counted)
    monkeypatch.setattr(pipelines, "counts_of", lambda *args: got.append(of_corpus(*args))
                        or got[-1])
    return passes, got


def _kept_counts(out, corpus, documents, tokenizer):
    """`of_corpus` as SpanBERT's recipe calls it under `keras-ctx pretrain` (`kept_in` the
    run directory `out`; `corpus`: the corpus' fingerprint)."""
    with token_counts.kept_in(out, corpus):
        return token_counts.of_corpus(tokenizers.tokenize_documents(documents, tokenizer),
                                      tokenizer, tokenizer.vocabulary_size())


def test_a_resumed_streamed_run_reads_its_counts_back_instead_of_counting(corpus, tmp_path,
                                                                          monkeypatch, capsys):
    docs, _, tokenizer = corpus
    docs = docs[:60]  # a small corpus: the test is of what is counted, and when
    documents = tf.data.Dataset.from_tensor_slices(docs)
    fingerprint = {"files": [{"path": "corpus.txt"}]}
    passes, _ = _spies(monkeypatch)
    first = _kept_counts(tmp_path, fingerprint, documents, tokenizer)
    np.testing.assert_array_equal(first, _reference_counts(docs, tokenizer))
    kept = json.loads((tmp_path / token_counts.KEPT_FILE).read_text())
    assert passes == [tokenizer.vocabulary_size()] and kept["token_counts"] == first.tolist()
    # Resumed: the claimed tokenizer (read back from the run) and the same corpus.
    tokenizers.save_tokenizer(tokenizer, str(tmp_path / "tokenizer"))
    claimed = tokenizers.load_tokenizer(str(tmp_path / "tokenizer"))
    np.testing.assert_array_equal(_kept_counts(tmp_path, fingerprint, documents, claimed),
                                  first)
    assert len(passes) == 1  # no second pass
    # --corpus-changed continue: another corpus is counted again, and those counts kept.
    changed = _kept_counts(tmp_path, {"files": []},
                           tf.data.Dataset.from_tensor_slices(docs[:20]), claimed)
    assert len(passes) == 2
    assert "token_counts.json are of another corpus: counting again." in capsys.readouterr().out
    np.testing.assert_array_equal(changed, _reference_counts(docs[:20], tokenizer))
    record = json.loads((tmp_path / token_counts.KEPT_FILE).read_text())
    assert record["corpus"] == {"files": []} and record["token_counts"] == changed.tolist()
    # Another tokenizer is counted again too; a block that fails keeps nothing.
    other = families.get("spanbert").train_tokenizer(documents.unbatch().take(20), 120)
    with pytest.raises(RuntimeError, match="before the claim"):
        with token_counts.kept_in(tmp_path, {"files": []}):
            token_counts.of_corpus(tokenizers.tokenize_documents(documents, other), other,
                                   other.vocabulary_size())
            raise RuntimeError("stopped before the claim")
    assert len(passes) == 3
    assert json.loads((tmp_path / token_counts.KEPT_FILE).read_text()) == record


def test_damaged_kept_counts_are_refused_naming_the_file(corpus, tmp_path):
    _, documents, tokenizer = corpus
    (tmp_path / token_counts.KEPT_FILE).write_text(json.dumps(
        {"corpus": None, "tokenizer": None, "vocabulary_size": 5, "token_counts": [1, -2]}))
    with pytest.raises(ConfigError, match=r"token_counts.json has token_counts\[1\]=-2"):
        _kept_counts(tmp_path, None, documents, tokenizer)


@pytest.mark.slow  # two small SpanBERT runs through keras-ctx pretrain
def test_keras_ctx_pretrain_counts_a_spanbert_corpus_once_and_resumes_on_those_counts(
        tmp_path, monkeypatch, capsys):
    from keras_ctx.commands.pretrain import pretrain

    docs = _zipf_documents(120, seed=2)
    path = tmp_path / "corpus.txt"
    path.write_text("".join("\n".join(doc) + "\n\n" for doc in docs))
    passes, got = _spies(monkeypatch)
    small = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32}
    for steps in (1, 2):  # the second resumes the first
        pretrain("spanbert-base", str(tmp_path / "run"), corpus=str(path), steps=steps,
                 batch_size=2, sequence_length=32, vocabulary_size=200, overrides=small)
    tokenizer = tokenizers.load_tokenizer(str(tmp_path / "run" / tokenizers.TOKENIZER_DIR))
    assert len(passes) == 1 and len(got) == 2, (passes, len(got))
    np.testing.assert_array_equal(got[1], got[0])
    np.testing.assert_array_equal(got[0], _reference_counts(docs, tokenizer))
    assert "Read the corpus' token counts from" in capsys.readouterr().out
