"""The files of a prepared data directory (`keras-ctx prepare`): names, schemas, readers.

What `keras_ctx.data.prepare` writes and `pretrain --data` reads back:
settings.json, manifest.json, each shard's `.json` record and its TFRecords
(raw little-endian int32 features, or UTF-8 text), and the tokenizer. Every
JSON file is read through `keras_ctx.common.files.read_json` and checked with
`keras_ctx.common.validation.check_fields` (one line naming the file, field
and fix); shards are checked against their sha256, the tokenizer against the
hash its shards were made with.
"""

import functools
import hashlib
import os

import numpy as np

from keras_ctx.common import files, validation
from keras_ctx.common.errors import DataError
from keras_ctx.data import fingerprints, tokenizers
from keras_ctx.data.corpora import CorpusError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2  # 2: raw int32 records (`record_bytes`); 1 wrote tf.train.Examples
SETTINGS = "settings.json"


class PreparedDataError(DataError):
    """A prepared data directory that is missing, incomplete, corrupt or does not match
    (a keras_ctx error: the command prints its message alone)."""


read_json = files.read_json  # the one JSON reader (keras_ctx.common.files)
# The one writer, in the layout prepared files always had (a manifest's fingerprint is
# the SHA-256 of its bytes, keras_ctx.data.fingerprints.manifest).
write_json = functools.partial(files.write_json, indent=1, sort_keys=True)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def read_text(path, start, end):
    """Bytes [start, end) of a corpus file as text; CorpusError (one line) if not UTF-8."""
    with open(path, "rb") as handle:
        handle.seek(start)
        raw = handle.read(end - start)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{path} is not valid UTF-8 (byte {start + error.start}: {error.reason}). Convert "
            "it first, e.g. `iconv -f latin1 -t utf-8`.") from None


def text_record(example, features):
    """One TFRecord of a "text" layout: its one feature's text, UTF-8 (ELMo's sentences)."""
    (name,) = features
    return example[name].encode("utf-8")


def record_bytes(example, features):
    """One TFRecord: the example's `features` (in that order) as little-endian int32.

    A raw record (`prepared_input` decodes it with tf.io.decode_raw): 4x
    faster to write and read than a tf.train.Example of int64 lists, and
    the same bytes in every process.
    """
    return b"".join(np.ascontiguousarray(example[name], "<i4").tobytes() for name in features)


def shard_path(out_dir, index):
    return os.path.join(out_dir, f"shard-{index:05d}.tfrecord")


def check_tokenizer(data_dir, record):
    """Raises when `data_dir`'s tokenizer/ is not the one its shards were made with."""
    found = fingerprints.directory(os.path.join(data_dir, tokenizers.TOKENIZER_DIR))
    if record.get("sha256") != found:
        raise PreparedDataError(
            f"{data_dir}/{tokenizers.TOKENIZER_DIR}/ is not the tokenizer its shards were "
            "made with (changed, or copied from other prepared data): their ids would be "
            f"read through another vocabulary. Restore it, or prepare {data_dir} again.")


# What the tokenizer was trained on, its hash and the run files a family keeps instead.
TOKENIZER_RECORD = "tokenizer_record.json"
# Its name before: the `tokenizers` library's file name, for a file that is not one. Read
# where it is the only one (data prepared then), never written.
EARLIER_TOKENIZER_RECORD = "tokenizer.json"


def tokenizer_record_path(data_dir):
    """`data_dir`'s tokenizer record: tokenizer_record.json, or the earlier name where only
    it is there."""
    path = os.path.join(data_dir, TOKENIZER_RECORD)
    earlier = os.path.join(data_dir, EARLIER_TOKENIZER_RECORD)
    return earlier if not os.path.isfile(path) and os.path.isfile(earlier) else path


def load_tokenizer(data_dir):
    """The tokenizer `prepare` trained for `data_dir`: a keras-hub tokenizer, or what the
    family keeps in its run files instead (ELMo's word vocabulary)."""
    tokenizer = tokenizers.load_tokenizer(os.path.join(data_dir, tokenizers.TOKENIZER_DIR))
    if tokenizer is not None:
        return tokenizer
    path = tokenizer_record_path(data_dir)
    kept = read_checked(path, "prepare's tokenizer record", TOKENIZER_RECORD_SCHEMA,
                        TOKENIZER_RECORD_FIX).get("run_files", {})
    if len(kept) != 1:
        raise PreparedDataError(f"{data_dir} holds no tokenizer; prepare it again.")
    return next(iter(kept.values()))


# Every field `prepare` wrote to each file, with the types and ranges `pretrain --data`
# needs (`validation.check_fields`, closed: a field no version wrote, a typo or a hand
# edit, is refused naming the closest). "token_counts": the corpus' count of each id
# (keras_ctx.data.token_counts, for the layouts that draw by it).
SETTINGS_SCHEMA = {
    "model": (str, None, True), "family": (str, None, True),
    "sequence_length": (int, 1, True), "vocabulary_size": (int, 1, True),
    "seed": (int, 0, True), "batch_size": ((int, type(None)), 1, True),
    "duplicate": ((int, type(None)), 1, False), "shard_bytes": (int, 1, False),
    "tokenizer_sample": (int, 1, False), "corpus": (str, None, False),
    "corpus_fingerprint": ((dict, str, type(None)), None, False),
    # a recipe whose text is its inputs (XLM's languages, CoVe's pairs; prepared_ids)
    "inputs": (dict, None, False)}
TOKEN_COUNTS = validation.ListOf(int, 0)  # keras_ctx.data.token_counts: one count per id
# A shard's "source": [the corpus file, its first byte, the byte after its last].
SHARD_SCHEMA = {"file": (str, None, True), "examples": (int, 0, True),
                "sha256": (str, None, True), "source": (validation.ListOf((str, int)), None, True),
                "made_with": ((str, type(None)), None, False),
                "token_counts": (TOKEN_COUNTS, None, False),
                "part": (str, None, False),  # a recipe's stream (keras_ctx.data.prepared_ids)
                "row_lengths": (TOKEN_COUNTS, None, False)}  # its pairs by row length
# A manifest's "parts" (prepared_ids): each stream's examples, a sentence stream's counts,
# a pair stream's row lengths (`prepared_ids.ROW_LENGTHS`; data prepared before they were
# counted has none: its run counts them in a pass over the ids).
PART_SCHEMA = {"examples": (int, 0, True), "token_counts": (TOKEN_COUNTS, None, False),
               "row_lengths": (TOKEN_COUNTS, None, False)}
# tokenizers.TOKENIZER_SAMPLE (run.json's, the claimed tokenizer's, prepare's record):
# the sentences the tokenizer read, of how many in the corpus, and the sample's seed.
TOKENIZER_SAMPLE_SCHEMA = {"sentences": (int, 0, False), "corpus_sentences": (int, 0, False),
                           "seed": ((int, type(None)), None, False)}
# tokenizer_record.json (and the manifest's "tokenizer"): the tokenizer's sample,
# its size, the run files a family keeps instead (ELMo's words, by file name) and the
# hash of tokenizer/.
TOKENIZER_RECORD_SCHEMA = {
    "tokenizer_sample": (validation.Record(TOKENIZER_SAMPLE_SCHEMA), None, False),
    "vocabulary_size": (int, 1, False), "run_files": (validation.MapOf(object), None, False),
    "sha256": ((str, type(None)), None, False)}
MANIFEST_SCHEMA = {
    "version": (int, None, True), "settings": (validation.Record(SETTINGS_SCHEMA), None, True),
    "layout": (str, None, True), "copies": (int, 1, True),
    "features": (validation.MapOf(int, 0), None, True),  # each feature's length
    "tokenizer": (validation.Record(TOKENIZER_RECORD_SCHEMA), None, True),
    "examples": (int, 0, True), "shards": (validation.ListOf(validation.Record(SHARD_SCHEMA)),
                                           None, True),
    "corpus_bytes": (int, 0, False), "token_counts": (TOKEN_COUNTS, None, False),
    "parts": (validation.MapOf(validation.Record(PART_SCHEMA)), None, False)}
TOKENIZER_RECORD_FIX = f"delete it and {tokenizers.TOKENIZER_DIR}/ and prepare again"


def read_checked(path, what, schema, fix):
    """The JSON object in `path`, checked against `schema`: closed (see the schemas) unless
    the schema is empty (any object)."""
    return validation.read_fields(path, what, schema, fix, closed=bool(schema))


def load_manifest(data_dir, verify=True):
    """The manifest of a prepared directory, checked: its fields, every shard present and
    unchanged, the tokenizer the one the shards were made with.

    Raises:
        PreparedDataError: naming the file, the field and the fix.
    """
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.isfile(path):
        raise PreparedDataError(
            f"{data_dir} has no {MANIFEST}: it is not prepared data, or `keras-ctx prepare` "
            "did not finish (run it again with the same arguments to resume).")
    fix = "run `keras-ctx prepare` again with the same arguments to rewrite it"
    try:
        manifest = files.read_json(path, "prepared data's manifest", fix)
        if isinstance(manifest, dict) and manifest.get("version") != MANIFEST_VERSION:
            raise PreparedDataError(
                f"{data_dir} was prepared by another keras_ctx version (records of version "
                f"{manifest.get('version')}, this one reads {MANIFEST_VERSION}); prepare it "
                "again into a new directory.")
        validation.check_fields(path, manifest, MANIFEST_SCHEMA, fix, closed=True)
        for i, shard in enumerate(manifest["shards"]):
            if os.path.basename(shard["file"]) != shard["file"] or shard["file"] in ("", ".",
                                                                                      ".."):
                raise PreparedDataError(f"{path} has shards[{i}].file={shard['file']!r}, not "
                                        f"a file name in {data_dir}: {fix}.")
    except PreparedDataError:
        raise
    except ValueError as error:
        raise PreparedDataError(str(error)) from None
    if manifest["examples"] != sum(s["examples"] for s in manifest["shards"]):
        raise PreparedDataError(f"{path} has examples={manifest['examples']}, not the sum of "
                                f"its shards' examples: {fix}.")
    for shard in manifest["shards"]:
        file = os.path.join(data_dir, shard["file"])
        if not os.path.isfile(file):
            raise PreparedDataError(f"{file} is missing; run `keras-ctx prepare` again into "
                                    f"{data_dir} to remake it.")
        if verify and sha256(file) != shard["sha256"]:
            raise PreparedDataError(f"{file} does not match its checksum in {MANIFEST} "
                                    "(changed or corrupt); delete it and run `keras-ctx "
                                    "prepare` again to remake it.")
    if "sha256" in manifest["tokenizer"]:
        check_tokenizer(data_dir, manifest["tokenizer"])
    if not manifest["examples"]:
        raise PreparedDataError(f"{data_dir} holds no examples: the corpus is too small for "
                                "this sequence length.")
    return manifest
