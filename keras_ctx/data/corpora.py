"""Reading text corpora into tf.data: files, tfds data sets, or the built-in corpus.

A source is one of:
  - a path to a text file, a directory (all its *.txt files, recursively), a
    glob pattern, or a list of those. Files are UTF-8, one sentence (or line)
    per line, documents separated by blank lines (BERT's pretraining format);
  - `"tfds:NAME[:SPLIT][#FEATURE]"`, a TensorFlow Datasets text data set (each
    example one document; FEATURE defaults to "text"; needs the data set
    downloaded or prepared beforehand);
  - "builtin": real English text every Python installation has, the docstrings
    of the standard library's modules, classes and functions, read from its
    source files at run time (nothing downloaded, nothing copied into the repo).

`documents(source)` gives one 1-D tf.string tensor per document (its
sentences); `text_lines(source)` gives one scalar tf.string per sentence.
"""

import ast
import functools
import glob
import os
import re
import stat
import sysconfig

from keras_ctx.common import progress, validation
from keras_ctx.common.optional import tensorflow as tf

BUILTIN = "builtin"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


class CorpusError(ValueError):
    """A corpus that cannot be read: missing, empty or not UTF-8."""


def regular_file(path):
    """`path` if it is a regular file (after symlinks); CorpusError on a pipe, device or socket.

    A FIFO would block the reader forever (or be read once, and a corpus is
    read more than once); a device never ends.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise CorpusError(f"Cannot read the corpus file {path} ({error.strerror}): fix or "
                          "remove it.") from None
    if not stat.S_ISREG(mode):
        raise CorpusError(
            f"The corpus {path} is a pipe, device or socket, not a file: it can be read "
            "only once (or never ends), and a corpus is read more than once (tokenizer, "
            "then training). Save it to a file first (e.g. `cat ... > "
            "corpus.txt`), or move it out of the corpus directory.")
    return path


def _walk_text_files(directory, skipped):
    """The *.txt files under `directory`, recursively, each real directory entered once.

    Symlinks are followed, but a directory reached again (a link loop such
    as `loop -> .`, or two links to one place) is not read twice: it is added to
    `skipped` as (its path, the path it was first reached by).
    """
    seen, found = {}, []
    for root, dirs, names in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            skipped.append((root + os.sep, seen[real] + os.sep))
            dirs[:] = []
            continue
        seen[real] = root
        dirs.sort()
        found.extend(os.path.join(root, n) for n in names if n.endswith(".txt"))
    return sorted(found)


def resolve_files(source):
    """The sorted list of files a path / directory / glob / list source names.

    Every file is a regular file (`regular_file`) and each is listed once, however
    many paths (symlinks, hard links, link loops, overlapping globs) reach it: the
    first path in sorted order; the others are said in one progress line.
    """
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not sources:
        raise CorpusError("The corpus source list is empty: give at least one path.")
    files, seen, skipped = [], {}, []
    for item in sources:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = _walk_text_files(item, skipped)
            if not found:
                raise CorpusError(f"The directory {item!r} holds no *.txt files.")
        elif os.path.lexists(item) and not glob.has_magic(item):
            found = [item]
        else:
            found = sorted(glob.glob(item))
            if not found:
                raise CorpusError(
                    f"No file matches {item!r}: give an existing file, directory or "
                    "glob pattern, 'builtin', or 'tfds:NAME'."
                )
        for path in found:
            key = _file_identity(path)
            if key in seen:
                skipped.append((path, seen[key]))
            else:
                seen[key] = path
                files.append(regular_file(path))
    _say_skipped(skipped)
    return files


def _file_identity(path):
    """What makes two paths one file: its device and inode (a hard link, a symlink, a
    link loop's second way in), else its real path (a path `regular_file` refuses)."""
    try:
        status = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (status.st_dev, status.st_ino)


_SAID = set()  # what `_say_skipped` said already (a command resolves its corpus often)


def _say_skipped(skipped):
    """One progress line naming the paths that reached a file already listed."""
    if not skipped:
        return
    line = (f"The corpus reaches {len(skipped)} file(s) or folder(s) by a second path (a "
            f"symlink, a hard link or a link loop); each is read once: {skipped[0][0]} is "
            f"{skipped[0][1]}" + (f", and {len(skipped) - 1} more" if len(skipped) > 1 else "")
            + ".")
    say = progress.current().say
    if say is not None and line not in _SAID:
        _SAID.add(line)
        say(line)


# Bounds that keep memory flat however long a line or a document is: a longer
# line is cut at its last blank before the bound, a longer document continues
# as the next one.
MAX_LINE_CHARS = 1 << 16
MAX_DOCUMENT_CHARS = 1 << 20


_CHUNK_CHARS = 1 << 20  # text is read in chunks this size (bounded memory, C-speed splits)


def _cut(text):
    """Pieces of `text` of at most MAX_LINE_CHARS, each cut at its last blank (dropped)."""
    while len(text) > MAX_LINE_CHARS:
        head = text[:MAX_LINE_CHARS]
        cut = max(head.rfind(" "), head.rfind("\t"))
        if cut <= 0:
            yield head  # one word longer than the bound: cut inside it
            text = text[MAX_LINE_CHARS:]
        else:
            yield head[:cut]
            text = text[cut + 1:]
    yield text


# A "word" longer than this is cut into pieces of it: tokenizer trainers spend time
# quadratic in a word's length on it (a 64K-character one stalls byte-level BPE) and
# WordPiece reads any word over 100 characters as [UNK] anyway (google-research/bert
# tokenization.py, max_input_chars_per_word=100).
MAX_WORD_CHARS = 1000
_LONG_WORD = re.compile(r"\S{%d}(?=\S)" % MAX_WORD_CHARS)


def _pieces(line):
    """`line` with its over-long words cut (`MAX_WORD_CHARS`), in pieces of MAX_LINE_CHARS."""
    if len(line) > MAX_WORD_CHARS:
        line = _LONG_WORD.sub(r"\g<0> ", line)
    return _cut(line) if len(line) > MAX_LINE_CHARS else (line,)


def _bounded_lines(handle):
    """The handle's lines (without "\n"), each cut into pieces of at most MAX_LINE_CHARS,
    words cut at MAX_WORD_CHARS.

    Reads chunks of _CHUNK_CHARS and splits them with `str.split` (C speed): a
    Python `readline` per line costs more than the disk on a fast machine.
    """
    carry = ""
    while chunk := handle.read(_CHUNK_CHARS):
        lines = (carry + chunk).split("\n")
        carry = lines.pop()
        for line in lines:
            if len(line) > MAX_WORD_CHARS:
                yield from _pieces(line)
            else:
                yield line
        if len(carry) > MAX_LINE_CHARS:  # a line still going on: keep only its tail
            *pieces, carry = _pieces(carry)
            yield from pieces
    if carry:
        yield from _pieces(carry)


def documents_of_lines(lines):
    """Groups lines into documents (lists of stripped non-empty lines), split on blank lines.

    A document longer than MAX_DOCUMENT_CHARS continues as the next one.
    """
    document, size = [], 0
    for line in lines:
        line = line.strip()
        if line:
            document.append(line)
            size += len(line)
            if size < MAX_DOCUMENT_CHARS:
                continue
        if document:
            yield document
            document, size = [], 0
    if document:
        yield document


def read_file_documents(path):
    """Yields each document of a UTF-8 text file as a list of its non-empty lines."""
    with open(path, encoding="utf-8") as handle:
        try:
            yield from documents_of_lines(_bounded_lines(handle))
        except UnicodeDecodeError as error:
            raise CorpusError(f"{path} is not valid UTF-8 ({error.reason}). Convert it "
                              "first, e.g. `iconv -f latin1 -t utf-8`.") from None


def _check_files(files):
    """Fails now, naming the file, on text that is not UTF-8; and on a corpus with no text.

    Reads in chunks, so a large corpus is checked without holding it in memory.
    """
    import codecs

    has_text = False
    for path in files:
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                try:
                    text = decoder.decode(chunk)
                except UnicodeDecodeError as error:
                    raise CorpusError(
                        f"{path} is not valid UTF-8 (byte {offset + error.start}: "
                        f"{error.reason}). Convert it first, e.g. `iconv -f latin1 -t utf-8`."
                    ) from None
                offset += len(chunk)
                has_text = has_text or bool(text.strip())
    if not has_text:
        raise CorpusError(f"The corpus {files} has no text (only empty or blank files).")


def _file_documents(source):
    files = resolve_files(source)
    _check_files(files)

    def generate():
        for path in files:
            yield from read_file_documents(path)

    return generate


def _docstring_sentences(docstring):
    """Prose sentences of a docstring: doctest and indented code lines dropped."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", docstring):
        lines = [
            line.strip() for line in paragraph.splitlines()
            if line.strip() and not line.startswith((" ", "\t"))
            and not line.strip().startswith((">>>", "..."))
        ]
        text = " ".join(lines)
        if len(text.split()) < 4:
            continue
        sentences.extend(s for s in _SENTENCE_END.split(text) if s)
    return sentences


@functools.lru_cache(maxsize=1)
def builtin_documents():
    """The built-in corpus: each docstring of the standard library, as its sentences.

    Read from the standard library's source files with `ast` (no module is
    imported), in a fixed order, so every machine with the same Python gets the
    same corpus.
    """
    from keras_ctx.common import progress

    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(
            d for d in subdirectories
            if d not in ("test", "tests", "idlelib", "site-packages", "__pycache__")
            and not d.startswith(("lib2to3", "turtledemo"))
        )
        paths.extend(os.path.join(directory, name) for name in sorted(files)
                     if name.endswith(".py"))
    documents = []
    # Parsing takes seconds: `keras-ctx pretrain` shows the count of files.
    for path in progress.current().count(paths, "standard library files parsed",
                                         total=len(paths)):
        try:
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node)
                if docstring:
                    sentences = _docstring_sentences(docstring)
                    if sentences:
                        documents.append(sentences)
    if not documents:
        raise CorpusError(f"No docstrings found under {root}; give a corpus path instead.")
    return documents


def _tfds_documents(source):
    import tensorflow_datasets as tfds

    spec = source[len("tfds:"):]
    spec, _, feature = spec.partition("#")
    name, _, split = spec.partition(":")
    dataset = tfds.load(name, split=split or "train")
    feature = feature or "text"
    return dataset.map(lambda example: tf.strings.split(
        tf.strings.strip(example[feature]), "\n"))


def documents(source):
    """tf.data.Dataset of documents, each a 1-D tf.string tensor of its sentences."""
    if isinstance(source, tf.data.Dataset):
        return source
    if isinstance(source, str) and source.startswith("tfds:"):
        return _tfds_documents(source)
    if isinstance(source, str) and source == BUILTIN:
        def generate():
            yield from builtin_documents()
    else:
        generate = _file_documents(source)
    return tf.data.Dataset.from_generator(
        generate, output_signature=tf.TensorSpec((None,), tf.string)
    )


def iter_documents(source):
    """Python iterator of documents, each a list of its sentences (str), for any source.

    Files are read in chunks (tens of MB/s per core, memory flat); "builtin" from
    memory; a tf.data or "tfds:" source through TensorFlow (slower).
    """
    if isinstance(source, str) and source == BUILTIN:
        yield from builtin_documents()
        return
    if isinstance(source, tf.data.Dataset) or (isinstance(source, str)
                                               and source.startswith("tfds:")):
        for document in documents(source).as_numpy_iterator():
            yield [s.decode("utf-8") for s in document]
        return
    for path in resolve_files(source):
        yield from read_file_documents(path)


# Sentences the tokenizer is trained on at most (sentencepiece's `input_sentence_size`):
# keras_ctx's choice, about 100 MB of English text, which a trainer learns in well
# under a minute; the sample, not the corpus, bounds the trainer's memory.
TOKENIZER_SAMPLE_SENTENCES = 1_000_000


class Sample(list):
    """The sampled sentences (a list), with `seen`: the corpus' sentence count."""

    seen = 0


def sample_sentences(source, size=TOKENIZER_SAMPLE_SENTENCES, seed=0):
    """A seeded uniform sample of at most `size` sentences of `source`, read in one stream.

    Reservoir sampling (Li 1994, "Algorithm L": geometric skips, so the
    random draws are few however long the corpus). Deterministic for a seed.

    Args:
        source: a corpus source (see the module docstring) or a tf.data of documents.
        size: the most sentences kept (None: all).
        seed: the sampling seed.

    Returns:
        A `Sample` (a list of str) whose `seen` is the number of sentences read.
    """
    validation.optional_positive_int("size", size)
    return reservoir(iter_documents(source), size, seed)


def reservoir(groups, size, seed=0):
    """A seeded uniform sample (a `Sample`, `seen` the items read) of at most `size` items
    of `groups`, an iterable of lists of items (a corpus' documents of sentences; a pair
    file's pairs, one a group), read once. Algorithm L (Li 1994): geometric skips, so
    the random draws are few however long the stream."""
    import math
    import random

    rng = random.Random(seed)
    sample, seen = Sample(), 0

    def skip(weight):  # Algorithm L: how many items pass before the next replacement
        return math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - weight))

    weight = math.exp(math.log(1.0 - rng.random()) / size) if size else 0.0
    replace_at = (size + skip(weight)) if size else None
    for group in groups:
        if size is None or seen < size:
            sample.extend(group[:None if size is None else size - seen])
        # Only the items Algorithm L picks are touched (a per-item loop halves the speed).
        while replace_at is not None and replace_at < seen + len(group):
            sample[rng.randrange(size)] = group[replace_at - seen]
            weight *= math.exp(math.log(1.0 - rng.random()) / size)
            replace_at += skip(weight) + 1
        seen += len(group)
    sample.seen = seen
    return sample


def text_lines(source):
    """tf.data.Dataset of scalar tf.string sentences, documents concatenated in order."""
    return documents(source).unbatch()
