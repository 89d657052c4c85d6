"""A loader for GloVe's text format (Pennington et al., 2014): `word v1 v2 ... vd` per line.

Some published files (glove.840B.300d) hold a few words that contain spaces;
give `dim` and the last `dim` fields of a line are read as the vector and the
rest (spaces included) as the word. Without `dim`, the first line fixes it.
Malformed lines (non-numeric values, a different number of values) raise a
ValueError naming the file and line. Files ending in `.gz` are read gzipped.
"""

import gzip

import numpy as np

from keras_ctx.common.validation import optional_positive_int


def _open(path):
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_glove(path, dim=None, max_words=None, keep=None):
    """Reads a GloVe text file.

    Args:
        path: the .txt (or .txt.gz) file.
        dim: the vector size; None: taken from the first line.
        max_words: stop after this many words (GloVe files are sorted by
            frequency, so this keeps the most frequent).
        keep: a set of words: only these are read (their values parsed and
            stored), so a 2.2M-word file costs the memory of the words kept.

    Returns:
        (words, vectors): a list of str and a float32 array (len(words), dim).
    """
    optional_positive_int("dim", dim)
    optional_positive_int("max_words", max_words)
    words, vectors, seen = [], [], {}
    spaces_allowed = dim is not None
    with _open(path) as f:
        for number, line in enumerate(f, start=1):
            if max_words is not None and len(words) >= max_words:
                break
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            fields = line.rstrip(" ").split(" ")
            if dim is None:
                if len(fields) < 2:
                    raise ValueError(
                        f"{path}, line {number}: expected 'word v1 ... vd', got {line[:80]!r}."
                    )
                dim = len(fields) - 1
            if len(fields) < dim + 1 or (not spaces_allowed and len(fields) != dim + 1):
                raise ValueError(
                    f"{path}, line {number}: expected a word and {dim} values, got "
                    f"{len(fields) - 1} values. The file has inconsistent dimensions "
                    "(or is truncated); fix the file, or pass `dim` if some words "
                    "contain spaces."
                )
            word = " ".join(fields[: len(fields) - dim])
            if keep is not None and word not in keep:
                continue
            try:
                vector = np.array(fields[len(fields) - dim :], dtype="float32")
            except ValueError:
                raise ValueError(
                    f"{path}, line {number}: the values of {word!r} are not all numbers "
                    f"(expected {dim} floats): {' '.join(fields[-dim:])[:80]!r}. With words "
                    "that contain spaces, pass `dim`."
                ) from None
            if len(fields) - dim > 1 and not all(fields[: len(fields) - dim]):
                raise ValueError(f"{path}, line {number}: empty word in {line[:80]!r}.")
            if word in seen:
                continue  # keep the first (most frequent) occurrence
            seen[word] = len(words)
            words.append(word)
            vectors.append(vector)
    if not words and keep is not None and dim is not None:  # none of `keep`: no rows
        return [], np.zeros((0, dim), "float32")
    if not words:
        raise ValueError(f"{path} holds no vectors.")
    return words, np.stack(vectors)


def glove_matrix(path, vocabulary, dim=None, oov="zeros", seed=0):
    """Vectors for `vocabulary` (a list of words, in id order) from a GloVe file.

    Row i is the vector of `vocabulary[i]`. Words missing from the file get
    zeros (`oov="zeros"`, as CoVe does) or small random vectors
    (`oov="random"`); padding (id 0) is always zeros.

    Returns:
        (matrix float32 (len(vocabulary), dim), number of words found).
    """
    if oov not in ("zeros", "random"):
        raise ValueError(f"`oov` must be 'zeros' or 'random', got {oov!r}.")
    words, vectors = read_glove(path, dim=dim, keep=set(vocabulary))
    index = {w: i for i, w in enumerate(words)}
    rng = np.random.default_rng(seed)
    dim = vectors.shape[1]
    matrix = np.zeros((len(vocabulary), dim), "float32")
    found = 0
    for i, word in enumerate(vocabulary):
        if word in index:
            matrix[i] = vectors[index[word]]
            found += 1
        elif oov == "random" and i > 0:
            matrix[i] = rng.normal(scale=0.1, size=dim)
    return matrix, found
