"""What a run's data is: fingerprints of the corpus and of the tokenizer trained on it.

A run directory records them (in pretrain_settings.json, under "fingerprints") so
that a resume can tell that the corpus file changed under the same path, or
that the tokenizer trained now is not the one the checkpoints were trained
with: either would continue the old embeddings under new ids.

`corpus(source)` is cheap at any size: each file's size and mtime plus a
SHA-256 of a few sampled 64 KiB blocks (start, end and evenly spaced ones),
read with seeks, never the whole file. A directory made by
`keras-ctx prepare` (a prepared-data manifest) is fingerprinted by its
manifest: `corpus(manifest_path)` hashes the manifest file, which names every
shard with its size and hash (see `manifest`).
"""

import hashlib
import json
import os

from keras_ctx.data import corpora

BLOCK = 1 << 16
SAMPLES = 16  # blocks hashed per file besides the first and the last
# The name `keras-ctx prepare` gives its manifest (issue 29): a directory holding it
# is prepared data, fingerprinted by the manifest alone.
MANIFEST_FILE = "manifest.json"


def _sampled_hash(path, size):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        offsets = {0, max(0, size - BLOCK)}
        offsets |= {size * i // (SAMPLES + 1) for i in range(1, SAMPLES + 1)}
        for offset in sorted(offsets):
            handle.seek(offset)
            digest.update(handle.read(BLOCK))
    return digest.hexdigest()


def file_fingerprint(path):
    """{"path", "size", "mtime_ns", "sha256_sampled"} of one regular file.

    A pipe or other stream is refused (`corpora.regular_file`): it can be read
    only once, and a corpus is read more than once.
    """
    info = os.stat(corpora.regular_file(path))
    return {"path": os.path.abspath(path), "size": info.st_size,
            "mtime_ns": info.st_mtime_ns,
            "sha256_sampled": _sampled_hash(path, info.st_size)}


def manifest(path):
    """The fingerprint of prepared data: the SHA-256 of its manifest file."""
    with open(path, "rb") as handle:
        return {"manifest": os.path.abspath(path),
                "sha256": hashlib.sha256(handle.read()).hexdigest()}


def corpus(source):
    """A JSON-able fingerprint of a corpus source (see the module docstring).

    Args:
        source: what `keras_ctx.data.corpora.documents` takes: a path,
            directory, glob or list of them, "builtin", "tfds:NAME", or a
            prepared-data directory / manifest.

    Returns:
        A dict; equal dicts mean the same data (up to edits that keep every
        file's size and mtime and miss every sampled block).
    """
    if not isinstance(source, (str, os.PathLike, list, tuple)):
        return {"source": repr(source)}  # a tf.data.Dataset: nothing on disk to check
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if source == corpora.BUILTIN or source.startswith("tfds:"):
            return {"source": source}  # the Python installation's / tfds' own versioned data
        if os.path.isdir(source) and os.path.isfile(os.path.join(source, MANIFEST_FILE)):
            return manifest(os.path.join(source, MANIFEST_FILE))
        if os.path.basename(source) == MANIFEST_FILE and os.path.isfile(source):
            return manifest(source)
    return {"files": [file_fingerprint(path) for path in corpora.resolve_files(source)]}


def tokenizer(tokenizer_or_vocabulary, extra=None):
    """The SHA-256 of a tokenizer's config (less its name) and vocabulary files, or None.

    Args:
        tokenizer_or_vocabulary: a keras-hub tokenizer, a word list (ELMo's
            vocabulary), or None.
        extra: the run-file info a family keeps beside (or instead of) a
            tokenizer (ELMo's word vocabulary), hashed with it.
    """
    import tempfile

    if tokenizer_or_vocabulary is None and not extra:
        return None
    digest = hashlib.sha256()
    digest.update(json.dumps(extra or {}, sort_keys=True, default=str).encode("utf-8"))
    if tokenizer_or_vocabulary is None:
        return digest.hexdigest()
    if isinstance(tokenizer_or_vocabulary, (list, tuple)):
        digest.update(json.dumps(list(tokenizer_or_vocabulary)).encode("utf-8"))
        return digest.hexdigest()
    import keras

    config = keras.saving.serialize_keras_object(tokenizer_or_vocabulary)
    config.get("config", {}).pop("name", None)  # Keras numbers names per process
    digest.update(json.dumps(config, sort_keys=True, default=str).encode("utf-8"))
    with tempfile.TemporaryDirectory() as directory:
        tokenizer_or_vocabulary.save_assets(directory)
        for root, _, names in sorted(os.walk(directory)):
            for name in sorted(names):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, directory).encode("utf-8") + b"\0")
                with open(path, "rb") as handle:
                    digest.update(handle.read())
    return digest.hexdigest()


def directory(path):
    """The SHA-256 of every file under `path` (names and bytes), or None if it is missing.

    What a run or prepared data records of its tokenizer/ directory: a
    tokenizer/ swapped in from another run (same size, other vocabulary) is
    told apart before any id is read through it.
    """
    if not os.path.isdir(path):
        return None
    digest = hashlib.sha256()
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            file = os.path.join(root, name)
            digest.update(os.path.relpath(file, path).encode("utf-8") + b"\0")
            with open(file, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            digest.update(b"\0")
    return digest.hexdigest()


def describe_change(previous, current):
    """A few words naming what differs between two corpus fingerprints."""
    if previous.get("files") is None or current.get("files") is None:
        return "a different source"
    before = {f["path"]: f for f in previous["files"]}
    after = {f["path"]: f for f in current["files"]}
    changed = sorted(p for p in before.keys() & after.keys() if before[p] != after[p])
    added, removed = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    words = []
    for label, paths in (("changed", changed), ("added", added), ("removed", removed)):
        if paths:
            more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
            words.append(f"{label} {paths[0]}{more}")
    return "; ".join(words) or "a different source"
