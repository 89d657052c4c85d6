import numpy as np
import pytest

from keras_ctx.data import corpora


def as_python(dataset):
    return [[s.decode() for s in doc] for doc in dataset.as_numpy_iterator()]


def test_documents_split_on_blank_lines_in_file_order(tmp_path):
    (tmp_path / "a.txt").write_text("One sentence.\nTwo sentences.\n\n\nSecond doc.\n")
    (tmp_path / "b.txt").write_text("  Third doc line one.  \nline two\n")
    got = as_python(corpora.documents(str(tmp_path)))
    assert got == [["One sentence.", "Two sentences."], ["Second doc."],
                   ["Third doc line one.", "line two"]]
    lines = [s.decode() for s in corpora.text_lines(str(tmp_path / "*.txt")).as_numpy_iterator()]
    assert lines == ["One sentence.", "Two sentences.", "Second doc.",
                     "Third doc line one.", "line two"]


def test_missing_empty_and_undecodable_corpora_fail_clearly(tmp_path):
    with pytest.raises(corpora.CorpusError, match="No file matches"):
        corpora.documents(str(tmp_path / "nope.txt"))
    with pytest.raises(corpora.CorpusError, match="no \\*.txt files"):
        corpora.documents(str(tmp_path))
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    with pytest.raises(corpora.CorpusError, match="has no text"):
        corpora.documents(str(tmp_path / "empty.txt"))
    (tmp_path / "latin.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(corpora.CorpusError, match="latin.txt is not valid UTF-8 \\(byte 3"):
        corpora.documents(str(tmp_path / "latin.txt"))
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)))
    with pytest.raises(corpora.CorpusError, match="binary.txt is not valid UTF-8"):
        corpora.documents(str(tmp_path))


def test_builtin_corpus_is_real_english_and_deterministic():
    docs = corpora.builtin_documents()
    words = [w.lower() for doc in docs for s in doc for w in s.split()]
    assert len(docs) > 1000 and len(words) > 100_000
    # Function words dominate real English text.
    counts = {w: words.count(w) for w in ("the", "of", "a", "is", "to")}
    assert counts["the"] / len(words) > 0.03, counts
    assert not any(s.startswith(">>>") for doc in docs for s in doc)
    first = next(iter(corpora.documents("builtin").take(1).as_numpy_iterator()))
    np.testing.assert_array_equal(first, np.array(docs[0], dtype=object).astype(bytes))


def test_a_50_megabyte_line_is_streamed_in_bounded_pieces(tmp_path):
    import tracemalloc

    from keras_ctx.data import corpora

    path = tmp_path / "one_line.txt"
    word = "word " * 200_000  # 1 MB
    with open(path, "w") as handle:
        for _ in range(50):
            handle.write(word)
        handle.write("\n\nsecond document.\n")
    tracemalloc.start()
    longest, total, documents = 0, 0, 0
    for document in corpora.documents(str(path)).as_numpy_iterator():
        documents += 1
        for sentence in document:
            longest = max(longest, len(sentence))
            total += sentence.count(b" ") + 1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == 50 * 200_000 + 2  # no word lost or cut
    assert longest <= corpora.MAX_LINE_CHARS
    assert peak < 16 * 2**20, f"peak Python memory {peak / 2**20:.0f} MiB"
