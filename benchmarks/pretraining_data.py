"""The pretraining data side by side with the data the papers' own scripts make.

BERT: `keras-ctx prepare bert-tiny` (static masks, dupe_factor 10) against
google-research/bert's create_pretraining_data.py run offline on the same
text (the built-in corpus in BERT's input format: a sentence per line, a
blank line between documents) with the same vocab.txt and settings
(max_seq_length 128, max_predictions_per_seq 20, masked_lm_prob 0.15,
short_seq_prob 0.1, dupe_factor 10). Give a checkout of google-research/bert
with `--google-bert DIR`: its two modules are copied to a temporary directory
with the one change TensorFlow 2 needs (`import tensorflow.compat.v1 as tf`),
never into this repository.

ALBERT (`--google-albert DIR`, google-research/albert): its
create_pretraining_data.py (SOP, whole-word n-gram masking, n <= 3) with
the same vocab.txt (its WordPiece path, `--vocab_file`) and settings, against
keras_ctx's SOP layout with static masks (`layouts.pairs_layout(kind="sop",
static_masking=True, whole_word_masking=True, max_ngram=3)`) on the same
tokenized documents, as `keras-ctx prepare`'s worker makes them.

Statistics per seed and their mean: instances, the share of label 0 (IsNext,
in order), the sequence length mean and median, masked positions per
sequence, the masked share of the real tokens, [UNK] tokens, segments A or B
of one token, and the prediction slots. docs/notes/data-references.md
records them.

ELMo (`--bilm-tf DIR`, allenai/bilm-tf): its `bilm/data.py` batcher
(`_get_batch`: sentences packed into rows that continue from batch to batch,
20 steps, batch 128 as bin/train_elmo.py) against `pipelines.bilm_dataset`
(one sentence a row, padded) on the built-in corpus' sentences with the
same word vocabulary: forward targets per epoch, the padding share of the
positions, sentences that start a row.

    python -m benchmarks.pretraining_data [--google-bert /path/to/bert]
        [--google-albert /path/to/albert] [--bilm-tf /path/to/bilm-tf] [--seeds 3]
        [--dir /tmp/pretraining_data]
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from benchmarks import common

SETTINGS = dict(sequence_length=128, max_predictions=20, masked_lm_prob=0.15,
                short_seq_prob=0.1, dupe_factor=10)


def statistics(ids, lengths, labels, positions, mask_ids, weights, sep_id, unk_id):
    """The side-by-side numbers of one set of NSP instances (numpy arrays, N rows)."""
    used = weights > 0
    original = ids.copy()
    rows = np.repeat(np.arange(len(ids))[:, None], positions.shape[1], axis=1)
    original[rows[used], positions[used]] = mask_ids[used]
    first_sep = np.argmax(original == sep_id, axis=1)
    a_lengths, b_lengths = first_sep - 1, lengths - first_sep - 2
    return {
        "instances": int(len(ids)),
        "label_0": float(np.mean(labels == 0)),
        "length_mean": float(lengths.mean()),
        "length_median": float(np.median(lengths)),
        "masked_per_sequence": float(used.sum(axis=1).mean()),
        "masked_share": float(used.sum() / lengths.sum()),
        "unk": int(sum((row[:n] == unk_id).sum() for row, n in zip(original, lengths))),
        "a_or_b_of_one_token": float(np.mean((a_lengths == 1) | (b_lengths == 1))),
        "slots": int(positions.shape[1]),
    }


def ours(directory, seed):
    """`keras-ctx prepare bert-tiny` on the built-in corpus: its statistics and files."""
    from keras_ctx import registry
    from keras_ctx.data import prepare, tokenizers

    out = os.path.join(directory, f"keras_ctx-{seed}")
    manifest = prepare.prepare("bert-tiny", "builtin", out, sequence_length=128, seed=seed,
                               workers=1, duplicate=SETTINGS["dupe_factor"], say=lambda _: None)
    tokenizer = prepare.load_tokenizer(out)
    run = registry.Run("bert-tiny", 1, 128, tokenizer.vocabulary_size(), seed)
    layout = prepare.layout_of(registry.of_preset("bert-tiny"), tokenizer, run,
                               SETTINGS["dupe_factor"])
    widths = {name: max(1, size) for name, size in layout.features.items()}
    records = []
    for shard in manifest["shards"]:
        import tensorflow as tf

        for record in tf.data.TFRecordDataset(os.path.join(out, shard["file"])):
            records.append(np.frombuffer(record.numpy(), "<i4"))
    table = np.stack(records)
    columns, start = {}, 0
    for name, width in widths.items():
        columns[name] = table[:, start:start + width]
        start += width
    special = tokenizers.special_token_ids(tokenizer)
    stats = statistics(columns["token_ids"], columns["padding_mask"].sum(1),
                       columns["next_sentence_labels"][:, 0], columns["mask_positions"],
                       columns["mask_ids"], columns["mask_weights"], special["sep"],
                       special["unk"])
    vocab = os.path.join(out, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as handle:
        handle.write("\n".join(tokenizers.vocabulary(tokenizer)) + "\n")
    return stats, vocab, glob.glob(os.path.join(out, "corpus", "*.txt"))


def albert_ours(directory, seed):
    """keras_ctx's SOP examples with ALBERT's static n-gram masks, on `ours`' documents."""
    from keras_ctx import registry
    from keras_ctx.data import layouts, prepare, tokenizers

    out = os.path.join(directory, f"keras_ctx-{seed}")
    tokenizer = prepare.load_tokenizer(out)
    run = registry.Run("albert-base", 1, SETTINGS["sequence_length"],
                       tokenizer.vocabulary_size(), seed)
    layout = layouts.pairs_layout(tokenizer, run, kind="sop", duplicate=SETTINGS["dupe_factor"],
                                  static_masking=True, whole_word_masking=True, max_ngram=3,
                                  max_predictions=SETTINGS["max_predictions"])
    documents = []
    for path in sorted(glob.glob(os.path.join(out, "corpus", "*.txt"))):
        with open(path, encoding="utf-8") as handle:
            documents += prepare._tokenized_documents(handle.read(),
                                                      prepare._graph_tokenize(tokenizer))
    rows = list(layout.examples(documents, np.random.default_rng([seed, 0])))
    column = {name: np.stack([row[name] for row in rows]) for name in rows[0]}
    special = tokenizers.special_token_ids(tokenizer)
    return statistics(column["token_ids"], column["padding_mask"].sum(1),
                      column["sentence_order_labels"], column["mask_positions"],
                      column["mask_ids"], column["mask_weights"], special["sep"],
                      special["unk"])


def _reference_modules(checkout, directory, name):
    """A reference's create_pretraining_data.py and tokenization.py, runnable offline.

    BERT's: `import tensorflow.compat.v1 as tf`; ALBERT's imports its
    tokenizer as `albert.tokenization` and tensorflow_hub (unused with a
    vocab.txt): a package and an empty stand-in.
    """
    target = os.path.join(directory, name)
    package = os.path.join(target, "albert") if name == "albert" else target
    os.makedirs(package, exist_ok=True)
    for module in ("create_pretraining_data.py", "tokenization.py"):
        with open(os.path.join(checkout, module), encoding="utf-8") as handle:
            text = handle.read()
        text = re.sub(r"^import tensorflow as tf$", "import tensorflow.compat.v1 as tf", text,
                      flags=re.M)
        where = target if module == "create_pretraining_data.py" else package
        with open(os.path.join(where, module), "w", encoding="utf-8") as handle:
            handle.write(text)
    if name == "albert":
        open(os.path.join(package, "__init__.py"), "w").close()
        with open(os.path.join(target, "tensorflow_hub.py"), "w") as handle:
            handle.write("# stand-in: only the SentencePiece-from-hub path uses it\n")
    return target


def google(checkout, directory, text_files, vocab, seed, name="bert"):
    """A reference create_pretraining_data.py on the same text and vocabulary."""
    import tensorflow as tf

    scripts = _reference_modules(checkout, directory, name)
    output = os.path.join(directory, f"{name}-{seed}.tfrecord")
    subprocess.run([sys.executable, os.path.join(scripts, "create_pretraining_data.py"),
                    f"--input_file={','.join(text_files)}", f"--output_file={output}",
                    f"--vocab_file={vocab}", "--do_lower_case=True",
                    f"--max_seq_length={SETTINGS['sequence_length']}",
                    f"--max_predictions_per_seq={SETTINGS['max_predictions']}",
                    f"--masked_lm_prob={SETTINGS['masked_lm_prob']}",
                    f"--short_seq_prob={SETTINGS['short_seq_prob']}",
                    f"--dupe_factor={SETTINGS['dupe_factor']}", f"--random_seed={seed}"],
                   check=True, cwd=scripts, capture_output=True)
    features = {name: tf.io.VarLenFeature(tf.int64) for name in (
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
        "next_sentence_labels")}
    features["masked_lm_weights"] = tf.io.VarLenFeature(tf.float32)
    rows = {name: [] for name in features}
    for record in tf.data.TFRecordDataset(output):
        parsed = tf.io.parse_single_example(record, features)
        for name in features:
            rows[name].append(tf.sparse.to_dense(parsed[name]).numpy())
    rows = {name: np.stack(values) for name, values in rows.items()}
    with open(vocab, encoding="utf-8") as handle:
        pieces = handle.read().split("\n")
    return statistics(rows["input_ids"], rows["input_mask"].sum(1),
                      rows["next_sentence_labels"][:, 0], rows["masked_lm_positions"],
                      rows["masked_lm_ids"], rows["masked_lm_weights"],
                      pieces.index("[SEP]"), pieces.index("[UNK]"))


def bilm_statistics(checkout, directory, batch_size=128, sequence_length=64):
    """ELMo's forward targets and padding: `pipelines.bilm_dataset` vs bilm-tf's batcher."""
    from keras_ctx.common.optional import tensorflow as tf
    from keras_ctx.data import corpora, pipelines
    from keras_ctx.data.vocabulary import word_vocabulary
    from keras_ctx.pretraining.bilm import _targets

    sentences = [s for doc in corpora.builtin_documents() for s in doc]
    vocabulary = word_vocabulary(sentences, 8000)
    docs = tf.data.Dataset.from_tensor_slices(tf.constant(sentences)).batch(1)
    targets = positions = 0
    for batch in pipelines.bilm_dataset(docs, vocabulary, batch_size, sequence_length):
        _, weights, _, _ = _targets(batch["token_ids"])
        targets += int(tf.reduce_sum(weights))
        positions += int(tf.size(batch["token_ids"]))
    ours = {"forward targets": targets, "positions not a forward target": 1 - targets / positions,
            "rows starting a sentence": 1.0}
    os.makedirs(directory, exist_ok=True)
    shutil.copy(os.path.join(checkout, "bilm", "data.py"), os.path.join(directory, "bilm_data.py"))
    with open(os.path.join(directory, "bilm_vocab.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(["<S>", "</S>", "<UNK>", *vocabulary[4:]]) + "\n")
    sys.path.insert(0, directory)
    import bilm_data  # the reference batcher (numpy only)

    vocab = bilm_data.Vocabulary(os.path.join(directory, "bilm_vocab.txt"))
    stream = ((vocab.encode(s), None) for s in sentences)
    targets = starts = rows = 0
    for batch in bilm_data._get_batch(stream, batch_size, 20, None):
        targets += int((batch["next_token_id"] > 0).sum())  # every position is a target
        starts += int((batch["token_ids"][:, 0] == vocab.bos).sum())
        rows += len(batch["token_ids"])
    theirs = {"forward targets": targets, "positions not a forward target": 0.0,
              "rows starting a sentence": starts / rows}
    return {"elmo keras_ctx": ours, "elmo bilm-tf": theirs}


def _mean(runs):
    return {key: float(np.mean([run[key] for run in runs])) for key in runs[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--google-bert",
                        help="a checkout of google-research/bert (eedf571)")
    parser.add_argument("--google-albert",
                        help="a checkout of google-research/albert (b772393)")
    parser.add_argument("--bilm-tf", help="a checkout of allenai/bilm-tf (7cffee2)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/pretraining_data")
    args = parser.parse_args()
    if os.path.isdir(args.dir):
        shutil.rmtree(args.dir)
    os.makedirs(args.dir)
    if args.bilm_tf:
        print(json.dumps(bilm_statistics(args.bilm_tf, args.dir)), flush=True)
    if not args.google_bert:
        return
    runs = {}
    for seed in range(args.seeds):
        stats, vocab, text_files = ours(args.dir, seed)
        found = {"bert keras_ctx": stats,
                 "bert google": google(args.google_bert, args.dir, text_files, vocab,
                                       12345 + seed)}
        if args.google_albert:
            found["albert keras_ctx"] = albert_ours(args.dir, seed)
            found["albert google"] = google(args.google_albert, args.dir, text_files, vocab,
                                            12345 + seed, "albert")
        print(json.dumps({"seed": seed, **found}), flush=True)
        for key, value in found.items():
            runs.setdefault(key, []).append(value)
    means = {key: _mean(value) for key, value in runs.items()}
    print(common.table(("statistic", *means),
                       [(key, *(f"{m[key]:.4g}" for m in means.values()))
                        for key in means["bert keras_ctx"]]))


if __name__ == "__main__":
    main()
