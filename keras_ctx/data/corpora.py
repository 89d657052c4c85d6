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
import sysconfig

import tensorflow as tf

BUILTIN = "builtin"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


class CorpusError(ValueError):
    """A corpus that cannot be read: missing, empty or not UTF-8."""


def resolve_files(source):
    """The sorted list of files a path / directory / glob / list source names."""
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not sources:
        raise CorpusError("The corpus source list is empty: give at least one path.")
    files = []
    for item in sources:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(glob.glob(os.path.join(item, "**", "*.txt"), recursive=True))
            if not found:
                raise CorpusError(f"The directory {item!r} holds no *.txt files.")
        elif os.path.isfile(item):
            found = [item]
        else:
            found = sorted(glob.glob(item))
            if not found:
                raise CorpusError(
                    f"No file matches {item!r}: give an existing file, directory or "
                    "glob pattern, 'builtin', or 'tfds:NAME'."
                )
        files.extend(found)
    return files


# Bounds that keep memory flat however long a line or a document is: a longer
# line is cut at its last blank before the bound, a longer document continues
# as the next one.
MAX_LINE_CHARS = 1 << 16
MAX_DOCUMENT_CHARS = 1 << 20


def _bounded_lines(handle):
    """The handle's lines, each cut into pieces of at most MAX_LINE_CHARS characters."""
    carry = ""
    while True:
        piece = handle.readline(MAX_LINE_CHARS - len(carry))
        if not piece:
            if carry:
                yield carry
            return
        piece = carry + piece
        carry = ""
        if piece.endswith("\n") or len(piece) < MAX_LINE_CHARS:
            yield piece
            continue
        cut = max(piece.rfind(" "), piece.rfind("\t"))
        if cut <= 0:
            yield piece  # one word longer than the bound: cut inside it
        else:
            yield piece[:cut]
            carry = piece[cut + 1:]


def _read_file_documents(path):
    """Yields each document of a (checked) file as a list of its non-empty lines."""
    document, size = [], 0
    with open(path, encoding="utf-8") as handle:
        for line in _bounded_lines(handle):
            line = line.strip()
            if line:
                document.append(line)
                size += len(line)
            if document and (not line or size >= MAX_DOCUMENT_CHARS):
                yield document
                document, size = [], 0
    if document:
        yield document


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
            yield from _read_file_documents(path)

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
    from keras_ctx import progress

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


def text_lines(source):
    """tf.data.Dataset of scalar tf.string sentences, documents concatenated in order."""
    return documents(source).unbatch()
