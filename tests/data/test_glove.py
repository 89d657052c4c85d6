import gzip

import numpy as np
import pytest

from keras_ctx.data.glove import glove_matrix, read_glove


def write(tmp_path, text, name="g.txt"):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def test_reads_words_and_vectors(tmp_path):
    path = write(tmp_path, "the 0.1 0.2 -0.3\ncafé 1 2 3\n. . . 4 5 6\n", "g.txt.gz")
    words, vectors = read_glove(path, dim=3)
    assert words == ["the", "café", ". . ."]  # a word with spaces, as in glove.840B
    np.testing.assert_allclose(vectors, [[0.1, 0.2, -0.3], [1, 2, 3], [4, 5, 6]])
    assert vectors.dtype == np.float32


def test_matrix_aligned_to_vocabulary(tmp_path):
    path = write(tmp_path, "a 1 1\nb 2 2\n")
    matrix, found = glove_matrix(path, ["<pad>", "b", "zzz", "a"])
    np.testing.assert_array_equal(matrix, [[0, 0], [2, 2], [0, 0], [1, 1]])
    assert found == 2
    matrix, _ = glove_matrix(path, ["<pad>", "zzz"], oov="random")
    assert (matrix[0] == 0).all() and (matrix[1] != 0).all()


def test_inconsistent_dimensions_name_the_line(tmp_path):
    path = write(tmp_path, "a 1 2 3\nb 1 2\n")
    with pytest.raises(ValueError, match="line 2.*3 values.*inconsistent"):
        read_glove(path)


def test_non_numeric_values_name_the_line(tmp_path):
    path = write(tmp_path, "a 1 2\nb 1 x\n")
    with pytest.raises(ValueError, match="line 2.*not all numbers"):
        read_glove(path)
    with pytest.raises(ValueError, match="line 2.*4 values.*inconsistent"):
        read_glove(write(tmp_path, "a 1 2 3\nb 1 2 3 4\n", "long.txt"))
    with pytest.raises(ValueError, match="no vectors"):
        read_glove(write(tmp_path, "\n", "empty.txt"))
