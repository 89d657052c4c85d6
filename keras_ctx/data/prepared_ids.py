"""A recipe's text as token ids, split once by every core: `keras-ctx prepare` for XLM and CoVe.

XLM's and CoVe's recipes read their inputs (each language's corpus, the
--parallel pair files) as streams of sentence ids, split into Moses words in
Python (sacremoses, some thousands of lines a CPU-second: docs/notes/data-at-scale.md):
in the tf.data pipeline, every epoch again. `keras-ctx prepare` splits them once instead, in processes
(`keras_ctx.data.prepare`'s shards, resumable, written atomically): a recipe
names its parts (`Part`: a language's sentences, or a pair file's pairs, each
with the tokenizers that read it), and each shard holds one part's ids in the
order the recipe's stream reads them. `pretrain --data` then builds the
recipe's own pipeline on these ids (`sentences`, `pairs`, `counted`): the
same streams, the same batches for a seed, nothing split again.

A shard's records are little-endian int32: a sentence's ids, or a pair's
[source length, source ids..., target ids...]. A sentence part's shards
count their ids (`token_counts`), summed per part in the manifest's "parts"
(XLM's masker weighs tokens by them, its sampler languages by the sentences).
A pair part whose recipe names the length of a pair's row (`Part.row_length`:
CoVe's) counts its pairs by that length up to the prepared sequence length
(`ROW_LENGTHS`), so a run counts the pairs its length limit keeps without
reading them (`pair_counts`).
"""

import collections
import dataclasses
import io
import os

import numpy as np

from keras_ctx import registry
from keras_ctx.common import files
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.data import corpora, token_counts
from keras_ctx.data.prepared_files import (PreparedDataError, load_manifest, load_tokenizer,
                                           read_text, sha256, shard_path, write_json)

LAYOUT = "sentence_ids"  # the manifest's layout name
LINES_PER_CALL = 1000  # lines tokenized per tokenizer call (the recipes' own)
# A pair part's shards and "parts" record: row_lengths[n] pairs whose row takes n
# positions (`Part.row_length`), n up to the prepared sequence length; a longer pair, or
# one no length keeps (row length 0), is in no bin.
ROW_LENGTHS = "row_lengths"


@dataclasses.dataclass(frozen=True)
class Part:
    """One stream a recipe reads: `tokenizers` of one (sentences of a corpus `source`) or two
    (a pair file `source`'s source and target sides). `row_length`: for a pair part,
    (source lengths, target lengths) -> the positions each pair's row takes, 0 for a pair
    no length keeps (int arrays; CoVe's `cove_recipe.row_length`), which `prepare`
    counts (`ROW_LENGTHS`); None: not counted."""

    name: str
    source: object
    tokenizers: tuple
    row_length: object = None

    @property
    def pairs(self):
        return len(self.tokenizers) == 2


def recipe_of(family):
    """The family's recipe (its dataset function) if it prepares sentence ids, else None."""
    dataset = family.dataset
    return dataset if getattr(dataset, "prepared_parts", None) is not None else None


def settings_inputs(run):
    """The run's inputs (languages, corpora, parallel, glove) as prepare's settings record
    them (JSON)."""
    return {key: value for key, value in (
        ("languages", list(dict(run.inputs).get("languages", ()))),
        ("corpora", [os.fspath(c) for c in dict(run.inputs).get("corpora", ())]),
        ("parallel", [list(p) for p in dict(run.inputs).get("parallel", ())]),
        ("glove", dict(run.inputs).get("glove"))) if value}


def prepared_run(run, data_dir, manifest):
    """`run` reading `data_dir`'s ids: its inputs are the ones the data was prepared from,
    and ("data", data_dir)."""
    inputs = manifest["settings"].get("inputs", {})
    return dataclasses.replace(run, inputs=(
        ("languages", tuple(inputs.get("languages", ()))),
        ("parallel", tuple(tuple(p) for p in inputs.get("parallel", ()))),
        ("corpora", tuple(inputs.get("corpora", ()))), ("glove", inputs.get("glove")),
        ("data", os.fspath(data_dir))))


def data_of(run):
    """The prepared directory a run reads its ids from, or None (its text is split as read)."""
    return dict(run.inputs).get("data")


# ---------------------------------------------------------------- the writing side

_WORKER = {}


def init_worker(out, preset, run_fields, in_process=False):
    """A process' parts (the recipe's tokenizers over `out`'s tokenizer)."""
    if not in_process:
        files.die_with_parent()  # a killed `prepare` leaves no worker writing shards
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = registry.Run(**run_fields)
    family = registry.of_preset(preset)
    parts = recipe_of(family).prepared_parts(load_tokenizer(out), run)
    _WORKER.update(parts={part.name: part for part in parts}, length=run.sequence_length)


def _ids(tokenizer, lines):
    """Each line's int32 ids, `LINES_PER_CALL` lines a call (as the recipes' streams)."""
    out = []
    for start in range(0, len(lines), LINES_PER_CALL):
        ids = tokenizer(tf.constant(lines[start:start + LINES_PER_CALL]))
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        values = ids.flat_values.numpy().astype(np.int32)
        out.extend(np.split(values, ids.row_splits.numpy()[1:-1]))
    return out


def _sentences_of(text):
    """The sentences `corpora.documents` streams of `text` (stripped, non-empty lines)."""
    lines = corpora._bounded_lines(io.StringIO(text))
    return [s for document in corpora.documents_of_lines(lines) for s in document]


def _pairs_of(text):
    """The (source, target) sides `xlm_recipe.pair_ids` streams of `text` (a trailing \\r
    dropped, blank lines skipped, split at the tab)."""
    lines = (line[:-1] if line.endswith("\r") else line for line in text.split("\n"))
    return [tuple(line.split("\t")) for line in lines if line.strip()]


def write_shard(out, index, part, path, start, end, made_with):
    """Writes shard `index`: part `part`'s ids of bytes [start, end) of `path`; returns its
    record."""
    part, text = _WORKER["parts"][part], read_text(path, start, end)
    if part.pairs:
        sides = _pairs_of(text)
        sources = _ids(part.tokenizers[0], [s for s, _ in sides])
        targets = _ids(part.tokenizers[1], [t for _, t in sides])
        records = [np.concatenate([[len(s)], s, t]).astype("<i4")
                   for s, t in zip(sources, targets)]
        lengths = None if part.row_length is None else _row_lengths(
            part.row_length, sources, targets, _WORKER["length"])
    else:
        records = [ids.astype("<i4") for ids in _ids(part.tokenizers[0], _sentences_of(text))]
    target = shard_path(out, index)
    with tf.io.TFRecordWriter(target + ".partial") as writer:
        for record in records:
            writer.write(record.tobytes())
    os.replace(target + ".partial", target)
    record = {"file": os.path.basename(target), "examples": len(records),
              "sha256": sha256(target), "source": [os.path.abspath(path), start, end],
              "made_with": made_with, "part": part.name}
    if not part.pairs:
        size = part.tokenizers[0].vocabulary_size()
        record[token_counts.MANIFEST_KEY] = token_counts.as_record(
            token_counts.of_arrays(records, size))
    elif lengths is not None:
        record[ROW_LENGTHS] = token_counts.as_record(lengths)
    write_json(os.path.splitext(target)[0] + ".json", record)
    return record


def _row_lengths(row_length, sources, targets, length):
    """How many pairs' rows take each of 0..`length` positions (`ROW_LENGTHS`)."""
    rows = np.asarray(row_length(np.array([len(s) for s in sources], np.int32),
                                 np.array([len(t) for t in targets], np.int32)), np.int64)
    return np.bincount(rows[(rows > 0) & (rows <= length)], minlength=length + 1)


# The shards' counts a part's record sums (taken out of the shards' records).
SUMMED = (token_counts.MANIFEST_KEY, ROW_LENGTHS)


def summed(shards):
    """The manifest's "parts": each part's examples, and the counts its shards made (a
    sentence part's token counts, a pair part's row lengths: `SUMMED`, taken out of the
    shards' records) where every shard of the part made them (a shard kept by a resumed
    prepare of an earlier keras_ctx may have none: its part then records none)."""
    parts = collections.defaultdict(list)
    for shard in shards:
        parts[shard["part"]].append(shard)
    found = {}
    for name, group in parts.items():
        found[name] = {"examples": sum(shard["examples"] for shard in group)}
        for key in SUMMED:
            counts = [shard.pop(key, None) for shard in group]
            if all(count is not None for count in counts):
                found[name][key] = token_counts.as_record(np.sum(counts, axis=0,
                                                                 dtype=np.int64))
    return found


# ---------------------------------------------------------------- the reading side

def _files(data_dir, part):
    manifest = load_manifest(data_dir, verify=False)  # checked when the run began
    found = [os.path.join(data_dir, shard["file"]) for shard in manifest["shards"]
             if shard.get("part") == part]
    if not found:
        raise PreparedDataError(f"{data_dir} holds no ids of {part} (it holds "
                                f"{', '.join(manifest.get('parts', {})) or 'none'}): prepare "
                                "it with the inputs of this run.")
    return manifest, found


def sentences(data_dir, part):
    """tf.data of a sentence part's int32 ids, in the order its corpus reads them."""
    return tf.data.TFRecordDataset(_files(data_dir, part)[1]).map(
        lambda record: tf.io.decode_raw(record, tf.int32, little_endian=True))


def pairs(data_dir, part):
    """tf.data of a pair part's (source ids, target ids), in the pair file's order."""
    def split(record):
        ids = tf.io.decode_raw(record, tf.int32, little_endian=True)
        return ids[1:1 + ids[0]], ids[1 + ids[0]:]

    return tf.data.TFRecordDataset(_files(data_dir, part)[1]).map(split)


def pair_counts(data_dir, part, length):
    """(pairs, those whose row takes at most `length` positions) of a pair part, as prepare
    counted them (`ROW_LENGTHS`); the second is None where its manifest has no row
    lengths (data prepared by an earlier keras_ctx, or a recipe that counts none) or
    `length` is past what they count."""
    record = _files(data_dir, part)[0]["parts"][part]
    counts = record.get(ROW_LENGTHS)
    if counts is None or length >= len(counts):
        return record["examples"], None
    return record["examples"], int(np.sum(counts[:length + 1]))


def counted(data_dir, part, vocabulary_size):
    """(sentences, token counts) of a sentence part, as prepare counted them."""
    record = _files(data_dir, part)[0]["parts"][part]
    where = f"{data_dir}'s manifest (parts.{part})"
    return record["examples"], token_counts.checked(record.get(token_counts.MANIFEST_KEY),
                                                    vocabulary_size, where)
