"""`keras-ctx prepare`: a family's pretraining examples, tokenized once, in sharded TFRecords.

As the papers' own pipelines (BERT's create_pretraining_data.py, XLNet's
create_tfrecords): the corpus is cut into shards of about `shard_bytes` at
document boundaries; one process per core tokenizes a shard and writes its
examples (the family's `Layout`, `keras_ctx.families.Family.prepared`), so a
worker holds one shard at a time. NSP's NotNext text comes from another
document of the same shard, as BERT's script samples within its input file.

    DATA_DIR/
      tokenizer/                 trained once on a seeded sample of the corpus
      tokenizer_record.json      its sample, hash and run files (tokenizer.json before)
      settings.json              what the shards were made with, the corpus' fingerprint
                                 included (a rerun must match: a changed corpus is refused)
      shard-00000.tfrecord       finished shards (written as *.partial, then renamed)
      shard-00000.json           its example count and sha256 (written after it); for a
                                 layout that draws by the corpus' token counts (SpanBERT),
                                 the shard's count of each id
      manifest.json              counts, tokenizer, settings, checksums (and the shards'
                                 token counts summed): written last

A recipe whose text is its inputs (XLM's languages and pairs, CoVe's pairs) writes its
streams' sentence ids instead (`keras_ctx.data.prepared_ids`), which its own pipeline
reads back under `pretrain --data`.

Run it again after a kill (even kill -9): finished shards are kept once
their checksum, source range and settings digest are checked, the rest are
made again, identically (shard k draws from seed (seed, k)). The workers
die with the command. The manifest records the tokenizer's files' hash:
a tokenizer/ swapped in from other data is refused where it is read.
`keras_ctx.data.prepared_input` reads the result.
"""

import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import re

import numpy as np

from keras_ctx import registry
from keras_ctx.common import files, progress, validation
from keras_ctx.data import corpora, fingerprints, prepared_ids, token_counts, tokenizers
from keras_ctx.data.tokenizers import train_tokenizer
from keras_ctx.common.files import replacing_directory
from keras_ctx.common.optional import require_tensorflow
from keras_ctx.data.prepared_files import (  # noqa: F401  (the files' names, re-exported)
    MANIFEST, MANIFEST_SCHEMA, MANIFEST_VERSION, SETTINGS, SETTINGS_SCHEMA, SHARD_SCHEMA,
    TOKENIZER_RECORD_FIX, TOKENIZER_RECORD_SCHEMA, PreparedDataError, check_tokenizer,
    load_manifest, load_tokenizer, read_checked, read_json, read_text, record_bytes, sha256,
    shard_path, text_record, tokenizer_record_path, write_json)

SHARD_BYTES = 32 << 20  # keras_ctx's choice: a worker's memory stays in the hundreds of MB
_BOUNDARY = re.compile(rb"\n[ \t\r]*\n")  # a blank line ends a document
_TOKENIZE_BATCH = 4096  # sentences per tokenizer call


def plan_shards(files, shard_bytes=SHARD_BYTES):
    """[(path, start, end)]: byte ranges of about `shard_bytes`, cut after a blank line.

    A range never splits a document unless no blank line follows within
    corpora.MAX_DOCUMENT_CHARS * 4 bytes (then it is cut after a line).
    """
    ranges = []
    for path in files:
        size = os.path.getsize(path)
        start = 0
        with open(path, "rb") as handle:
            while start < size:
                end = min(size, start + shard_bytes)
                if end < size:
                    handle.seek(end)
                    window = handle.read(corpora.MAX_DOCUMENT_CHARS * 4)
                    found = _BOUNDARY.search(window) or re.search(rb"\n", window)
                    end = min(size, end + found.end()) if found else size
                ranges.append((path, start, end))
                start = end
    return ranges


def _files_of(source):
    """The files a file source names (a path, directory or glob), or None for a source
    read as documents (builtin, tfds:NAME, a list or tf.data source: `_stage_source`)."""
    if isinstance(source, (str, os.PathLike)) and os.fspath(source) != corpora.BUILTIN and (
            not os.fspath(source).startswith("tfds:")):
        return corpora.resolve_files(source)
    return None


def _stage_source(source, out_dir, shard_bytes, name="corpus"):
    """A non-file source (builtin, tfds, tf.data) written as text files under out_dir/name."""
    directory = os.path.join(out_dir, name)
    done = os.path.join(directory, "done.json")
    if os.path.isfile(done):
        return read_checked(done, "prepare's staged corpus", {"files": (list, None, True)},
                            "delete the corpus/ folder and prepare again")["files"]
    os.makedirs(directory, exist_ok=True)
    files, handle, size = [], None, shard_bytes
    for document in corpora.iter_documents(source):
        if size >= shard_bytes:
            if handle:
                handle.close()
            files.append(os.path.join(directory, f"part-{len(files):05d}.txt"))
            handle, size = open(files[-1], "w", encoding="utf-8"), 0
        text = "\n".join(document) + "\n\n"
        handle.write(text)
        size += len(text.encode("utf-8"))
    if handle:
        handle.close()
    write_json(done, {"files": files})
    return files


# ---------------------------------------------------------------- the worker side

_WORKER = {}


def layout_of(family, tokenizer, run, duplicate=None):
    """`family`'s prepared `Layout`, with `duplicate` copies if given (static masks only)."""
    layout = family.prepared(tokenizer, run)
    if duplicate is None or duplicate == layout.copies:
        return layout
    if layout.with_copies is None:
        raise PreparedDataError(
            f"{family.name}'s prepared examples are corrupted when read (fresh masks or "
            "noise every epoch), so they are written once: drop `duplicate`.")
    return layout.with_copies(duplicate)


def _init_worker(out_dir, preset, run_fields, duplicate=None, in_process=False):
    if not in_process:
        files.die_with_parent()  # a killed `prepare` leaves no worker writing shards
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = registry.Run(**run_fields)
    tokenizer = load_tokenizer(out_dir)
    layout = layout_of(registry.of_preset(preset), tokenizer, run, duplicate)
    _WORKER.update(layout=layout, tokenizer=tokenizer, run=run,
                   tokenize=layout.tokenize or _graph_tokenize(tokenizer))


def _graph_tokenize(tokenizer):
    """`tokenizer.tokenize` as a tf.function: 7x its eager speed (keras-hub's eager
    call turns its ragged result into Python lists)."""
    import tensorflow as tf

    tokenize = tf.function(tokenizer.tokenize,
                           input_signature=[tf.TensorSpec([None], tf.string)])

    def ids_of(sentences):
        tokens = tokenize(tf.constant(sentences))
        values = tokens.flat_values.numpy().astype(np.int32)
        return np.split(values, tokens.row_splits.numpy()[1:-1])

    return ids_of


def _tokenized_documents(text, tokenize):
    """The documents of `text` as lists of int32 arrays (empty sentences dropped).

    `tokenize`: a list of sentences -> a list of int32 id arrays.
    """
    import io

    documents = list(corpora.documents_of_lines(corpora._bounded_lines(io.StringIO(text))))
    sentences = [s for document in documents for s in document]
    ids = []
    starts = range(0, len(sentences), _TOKENIZE_BATCH)
    for start in progress.current().count(
            starts, "sentences tokenized", total=len(sentences),
            weight=lambda start: min(_TOKENIZE_BATCH, len(sentences) - start)):
        ids.extend(tokenize(sentences[start:start + _TOKENIZE_BATCH]))
    out, position = [], 0
    for document in documents:
        tokenized = [s for s in ids[position:position + len(document)] if len(s)]
        position += len(document)
        if tokenized:
            out.append(tokenized)
    return out


def _prepare_shard(out_dir, index, path, start, end, seed, made_with=None):
    """Writes shard `index` (examples of bytes [start, end) of `path`); returns its record."""
    import tensorflow as tf

    layout, tokenize = _WORKER["layout"], _WORKER["tokenize"]
    text = read_text(path, start, end)
    documents = _tokenized_documents(text, tokenize)
    del text
    counted = None
    if layout.counted is not None:  # the read side draws by the corpus' token counts
        counted = token_counts.as_record(token_counts.of_arrays(
            (sentence for document in documents for sentence in document),
            _WORKER["tokenizer"].vocabulary_size()))
    target = shard_path(out_dir, index)
    count = 0
    with tf.io.TFRecordWriter(target + ".partial") as writer:
        encode = text_record if layout.records == "text" else record_bytes
        # Silent in a worker process; the shard's own line says when it is done.
        examples = layout.examples(documents, np.random.default_rng([seed, index]))
        for example in progress.current().count(examples, "examples written"):
            writer.write(encode(example, layout.features))
            count += 1
    os.replace(target + ".partial", target)
    record = {"file": os.path.basename(target), "examples": count, "sha256": sha256(target),
              "source": [os.path.abspath(path), start, end], "made_with": made_with}
    if counted is not None:
        record[token_counts.MANIFEST_KEY] = counted
    write_json(os.path.splitext(target)[0] + ".json", record)
    return record


# ---------------------------------------------------------------- the main side

def _settings_digest(settings, tokenizer_sha256):
    """What a shard was made with: the settings (corpus fingerprint included) and tokenizer."""
    text = json.dumps([settings, tokenizer_sha256], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _claim(out, settings):
    """Makes `out` this data's directory, or checks that it holds data of these `settings`."""
    settings_path = os.path.join(out, SETTINGS)
    if os.path.isfile(settings_path):
        fix = "give another --out, or delete it to prepare again"
        earlier = read_checked(settings_path, "prepare's settings", SETTINGS_SCHEMA, fix)
        if earlier == settings:
            return
        changed = sorted(k for k in settings if earlier.get(k) != settings[k])
        if changed == ["corpus_fingerprint"]:
                    raise PreparedDataError(
                f"The corpus changed since {out} was prepared from it ("
                f"{fingerprints.describe_change(earlier[changed[0]], settings[changed[0]])}): "
                "its shards hold the old text. Prepare into another --out, or delete "
                f"{out} to prepare the new text.")
        raise PreparedDataError(
            f"{out} holds data prepared with other settings ({', '.join(changed)}); {fix}.")
    if set(os.listdir(out)) - {files.LOCK_FILE}:
        raise PreparedDataError(f"{out} is not empty and holds no prepared data; give an "
                                "empty or new directory.")
    write_json(settings_path, settings)


def _tokenizer(out, family, corpus, settings, run):
    """tokenizer_record.json's record: the tokenizer is trained once (then checked, not
    retrained)."""
    tokenizer_dir = os.path.join(out, tokenizers.TOKENIZER_DIR)
    tokenizer_info = tokenizer_record_path(out)
    if not os.path.isfile(tokenizer_info):
        # A recipe whose text is its inputs says what its tokenizer reads (as `pretrain`).
        tokenizer_text = getattr(family.dataset, "tokenizer_text", None)
        sample = tokenizer_text(run) if tokenizer_text else None
        if sample is None:
            sample = corpora.sample_sentences(corpus, settings["tokenizer_sample"],
                                              settings["seed"])
        tokenizer, sampled = train_tokenizer(family, sample, run)
        saved, extra = family.run_files(tokenizer)
        if saved is not None:
            with replacing_directory(tokenizer_dir, overwrite=True) as staging:
                tokenizers.save_tokenizer(saved, staging)
            sampled["vocabulary_size"] = saved.vocabulary_size()
        write_json(tokenizer_info, dict(sampled, run_files=extra,
                                         sha256=fingerprints.directory(tokenizer_dir)))
        del sample, tokenizer  # a million sentences: not held while the workers run
    record = read_checked(tokenizer_info, "prepare's tokenizer record",
                          TOKENIZER_RECORD_SCHEMA, TOKENIZER_RECORD_FIX)
    check_tokenizer(out, record)
    return record


def _finished(out, index, source, made_with, counted=False):
    """(record, stale files) of shard `index`: its record if it is finished and whole, made
    from `source` with `made_with` (else None), and the files of an unfinished one (to be
    removed and made again). A whole shard made from other text or with other settings
    (copied from other prepared data: this directory's settings.json matches) is refused
    naming the shard and its source; nothing is removed here.
    """
    target = shard_path(out, index)
    done = os.path.splitext(target)[0] + ".json"
    stale = [path for path in (done, target) if os.path.lexists(path)]
    if not os.path.isfile(done):
        return None, stale
    try:
        record = validation.check_fields(done, files.read_json(done), SHARD_SCHEMA, "",
                                         closed=True)
    except ValueError:
        return None, stale  # truncated or edited: made again
    if not os.path.isfile(target) or sha256(target) != record["sha256"]:
        return None, stale
    if record.get("made_with") is None:
        return None, stale  # written before records said what made them: made again
    if counted and token_counts.MANIFEST_KEY not in record:
        return None, stale  # written before its ids were counted: made again
    ours = [os.path.abspath(source[0]), *source[1:]]
    if (record["source"] != ours or record["made_with"] != made_with
            or record["file"] != os.path.basename(target)):
        theirs = record["source"]
        where = (f"{theirs[0]} (bytes {theirs[1]}-{theirs[2]})"
                 if isinstance(theirs, list) and len(theirs) == 3 else repr(theirs))
        why = (f"was made from {where}, not from {ours[0]} (bytes {ours[1]}-{ours[2]})"
               if theirs != ours else f"is recorded as {record['file']!r}"
               if record["file"] != os.path.basename(target)
               else "was made with other settings or another tokenizer")
        raise PreparedDataError(
            f"{target} {why}: it belongs to other prepared data. Move it and {done} out of "
            f"{out} (or delete them) and run `keras-ctx prepare` again; nothing was changed.")
    return record, []


def _run_of_inputs(family, recipe, run, corpus, languages, parallel, glove):
    """(the run with the checked inputs of a recipe that reads them, the fingerprint of its
    text: the corpus' and the pair files'); a flag of theirs given to another is refused."""
    if recipe is None:
        if languages or parallel or glove:
            raise PreparedDataError(
                f"--languages, --parallel and --glove are read by the recipes that prepare "
                f"sentence ids (XLM's, CoVe's); {family.name}'s reads one --corpus: drop them.")
        return run, fingerprints.corpus(corpus)
    check = recipe.check_inputs
    languages, parallel = check(corpus, languages, parallel,
                                *((glove,) if getattr(check, "reads_glove", False) else ()))
    sources = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
    run = dataclasses.replace(run, inputs=(
        ("languages", languages), ("parallel", parallel), ("corpora", tuple(sources)),
        ("glove", glove and os.fspath(glove))))
    family.recipe_config(run)  # what `pretrain --data` would refuse (a CLM preset's pairs)
    fingerprint = fingerprints.corpus(corpus)
    if parallel:  # the pair files are the run's text too (as `pretrain` fingerprints them)
        pairs = fingerprints.corpus([pair[2] for pair in parallel])
        fingerprint = {**fingerprint, "files": fingerprint.get("files", []) + pairs["files"]}
    return run, fingerprint


def _planned_parts(recipe, out, run, fingerprint, shard_bytes):
    """([(part, path, start, end)] of the recipe's streams, the workers' run: reading `out`).

    The parts are made here (CoVe's target vocabulary counted once and kept in `out`, read
    back by a rerun and by the workers: `prepared_ids.prepared_run`'s ("data", out))."""
    with token_counts.kept_in(out, fingerprint, resume=True):
        parts = recipe.prepared_parts(load_tokenizer(out), run)
    plan = []
    for part in parts:  # a pair file is a path (xlm_recipe.check_parallel)
        paths = _files_of(part.source) or _stage_source(part.source, out, shard_bytes,
                                                        f"corpus-{part.name}")
        plan += [(part, *cut) for cut in plan_shards(paths, shard_bytes)]
    return plan, dataclasses.replace(run, inputs=run.inputs + (("data", os.fspath(out)),))


def _make_shards(out, todo, workers, work, made_with, records, say):
    """Writes the shards `todo` ([(index, part, path, start, end)]) into `records`, in this
    process (one shard, or one worker) or `workers` processes; `work`: (initializer, its
    arguments, the shard writer, the seed a layout's shards draw from or None)."""
    initializer, arguments, write, seed = work
    say(f"Preparing {len(todo)} of {len(records)} shards with {min(workers, len(todo) or 1)} "
        f"processes ({len(records) - len(todo)} already done).")

    def call(index, part, path, start, end):
        return (write, out, index, *((part,) if seed is None else ()), path, start, end,
                *(() if seed is None else (seed,)), made_with)

    if len(todo) == 1 or workers == 1:
        # One process: this one (a worker would start TensorFlow again for nothing).
        initializer(*arguments, in_process=True)
        for item in todo:
            function, *args = call(*item)
            records[item[0]] = function(*args)
            say(f"Shard {item[0]}: {records[item[0]]['examples']:,} examples.")
    elif todo:
        context = multiprocessing.get_context("spawn")  # TensorFlow is not fork-safe
        with concurrent.futures.ProcessPoolExecutor(
                min(workers, len(todo)), mp_context=context, initializer=initializer,
                initargs=arguments) as pool:
            futures = {pool.submit(*call(*item)): item[0] for item in todo}
            for future in concurrent.futures.as_completed(futures):
                records[futures[future]] = future.result()
                say(f"Shard {futures[future]}: {records[futures[future]]['examples']:,} "
                    "examples.")


def prepare(preset, corpus, out, sequence_length=128, vocabulary_size=8000, seed=0,
            workers=None, shard_bytes=SHARD_BYTES, tokenizer_sample=None, duplicate=None,
            batch_size=None, languages=None, parallel=(), glove=None, say=print):
    """Writes `preset`'s pretraining examples of `corpus` as sharded TFRecords in `out`.

    Args:
        preset: a preset name; its family's `prepared` layout says what an example is.
        corpus: a corpus source (`keras_ctx.data.corpora`).
        out: the data directory (created; an unfinished one with the same
            settings and corpus is resumed: its finished shards are checked
            against their checksums and what they were made from, and only
            whole ones are kept).
        sequence_length, vocabulary_size, seed: as `keras-ctx pretrain`.
        workers: processes (default: every core). They end with this process.
        shard_bytes: corpus bytes per shard (bounds each worker's memory);
            divided by the layout's copies (a shard's `duplicate` passes are
            held and shuffled together).
        tokenizer_sample: sentences the tokenizer learns from (default
            `corpora.TOKENIZER_SAMPLE_SENTENCES`).
        duplicate: copies of each instance with its own static masks, for the
            layouts that write masks (BERT's dupe_factor; default the
            family's: 10 for BERT). Each copy is written: disk and time grow
            with it.
        batch_size: the global batch, for layouts cut for one (XLNet's rows
            continue row by row from batch to batch); train with the same.
        languages, parallel, glove: the inputs of a recipe that reads them, as
            `keras-ctx pretrain`'s (XLM's --languages and --parallel, CoVe's
            --parallel and --glove): its sentence ids are prepared
            (`keras_ctx.data.prepared_ids`), and `pretrain --data` reads the
            inputs recorded here.

    Returns:
        The manifest (a dict, also written to `out/manifest.json`).
    """
    family = registry.of_preset(preset)
    recipe = prepared_ids.recipe_of(family)
    if family.prepared is None and recipe is None:
        raise PreparedDataError(
            f"`keras-ctx prepare` has no example layout for {family.name} yet"
            f"{f' ({family.no_pretraining})' if family.no_pretraining else ''}; "
            f"use `keras-ctx pretrain {preset} "
            f"{getattr(family.dataset, 'needs', '--corpus ...')}` instead.")  # CoVe's inputs
    # Every argument is checked, and the corpus read, before `out` is written.
    validation.check_args(sequence_length=sequence_length, vocabulary_size=vocabulary_size,
                          seed=seed, workers=workers, shard_bytes=shard_bytes,
                          tokenizer_sample=tokenizer_sample, duplicate=duplicate,
                          batch_size=batch_size)
    # Shards are TFRecords written through tf.data: without TensorFlow, refused before `out`.
    require_tensorflow("`keras-ctx prepare` (its shards are TFRecords)")
    workers = workers or os.cpu_count() or 1
    run, fingerprint = _run_of_inputs(family, recipe, registry.Run(
        preset, batch_size or 1, sequence_length, vocabulary_size, seed), corpus, languages,
        parallel, glove)
    settings = {"model": preset, "family": family.name, "corpus": str(corpus),
                "corpus_fingerprint": fingerprint,
                "sequence_length": sequence_length, "vocabulary_size": vocabulary_size,
                "seed": seed, "shard_bytes": shard_bytes, "duplicate": duplicate,
                "batch_size": batch_size,
                "tokenizer_sample": tokenizer_sample or corpora.TOKENIZER_SAMPLE_SENTENCES,
                **({"inputs": prepared_ids.settings_inputs(run)} if recipe else {})}
    settings = json.loads(json.dumps(settings))  # as read back
    paths = _files_of(corpus)  # read now: a missing file is refused before `out` is written
    with files.writing(out):
        _claim(out, settings)
        tokenizer_record = _tokenizer(out, family, corpus, settings, run)
        made_with = _settings_digest(settings, tokenizer_record.get("sha256"))
        if recipe is None:
            if paths is None:
                paths = _stage_source(corpus, out, shard_bytes)
            layout = layout_of(family, load_tokenizer(out), run, duplicate)
            plan = [(None, *cut) for cut in plan_shards(paths,
                                                        max(1, shard_bytes // layout.copies))]
            work = (_init_worker, (out, preset, {**run.__dict__}, duplicate), _prepare_shard,
                    seed)
            counted = [layout.counted is not None] * len(plan)
        else:
            plan, run = _planned_parts(recipe, out, run, fingerprint, shard_bytes)
            work = (prepared_ids.init_worker, (out, preset, {**run.__dict__}),
                    prepared_ids.write_shard, None)
            counted = [not part.pairs for part, *_ in plan]
        records, todo, stale = {}, [], []
        for index, (part, path, start, end) in enumerate(plan):  # every shard checked first
            records[index], files_to_remake = _finished(out, index, (path, start, end),
                                                        made_with, counted[index])
            stale += files_to_remake
            if records[index] is None:
                todo.append((index, part and part.name, path, start, end))
        for path in stale:  # then an unfinished shard's files go
            os.remove(path)
        _make_shards(out, todo, workers, work, made_with, records, say)
        shards = [records[i] for i in range(len(plan))]
        manifest = {"version": MANIFEST_VERSION, "settings": settings,
                    "tokenizer": tokenizer_record, "shards": shards,
                    "examples": sum(s["examples"] for s in shards),
                    "corpus_bytes": sum(end - start for _, _, start, end in plan)}
        if recipe is None:
            manifest.update(layout=layout.name, copies=layout.copies, features=layout.features)
            if layout.counted is not None:  # the shards' counts summed, for the read side
                manifest[token_counts.MANIFEST_KEY] = token_counts.as_record(np.sum(
                    [s.pop(token_counts.MANIFEST_KEY) for s in shards], axis=0,
                    dtype=np.int64))
        else:
            manifest.update(layout=prepared_ids.LAYOUT, copies=1, features={},
                            parts=prepared_ids.summed(shards))
        write_json(os.path.join(out, MANIFEST), manifest)
    say(f"Prepared {manifest['examples']:,} examples in {len(shards)} shards in {out}.")
    return manifest
