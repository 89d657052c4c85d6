import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import corpora, pipelines, prepare, prepared_input, segments
from keras_ctx.families import Run


def test_sample_is_seeded_uniform_and_bounded(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("".join(f"line {i}\n" + ("\n" if i % 7 == 0 else "") for i in range(20_000)))
    sample = corpora.sample_sentences(str(path), 2_000, seed=3)
    assert len(sample) == 2_000 and sample.seen == 20_000
    assert sample == corpora.sample_sentences(str(path), 2_000, seed=3)
    assert sample != corpora.sample_sentences(str(path), 2_000, seed=4)
    index = np.array([int(s.split()[1]) for s in sample])
    assert len(set(index)) == 2_000
    # Uniform over the corpus: each quarter holds about a quarter (binomial sd ~19).
    counts = np.histogram(index, bins=4, range=(0, 20_000))[0]
    assert np.all(np.abs(counts - 500) < 100), counts
    assert corpora.sample_sentences(str(path), None).seen == 20_000


def test_pair_examples_equal_the_nsp_pipeline_epoch():
    rng = np.random.default_rng(0)
    docs = [[rng.integers(5, 50, int(rng.integers(3, 20))).astype(np.int32)
             for _ in range(int(rng.integers(2, 8)))] for _ in range(40)]
    pipeline = list(segments.nsp_pairs(docs, 32, 2, 3, 0, seed=7).as_numpy_iterator())
    prepared = list(segments.pair_examples("nsp", docs, 32, 2, 3, 0,
                                           rng=np.random.default_rng([7, 0])))
    assert len(pipeline) == len(prepared) > 20
    for a, b in zip(pipeline, prepared):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    labels = np.array([e["next_sentence_labels"] for e in prepared])
    assert 0.3 < labels.mean() < 0.7  # NotNext with probability 1/2


class _Chunks:
    """A chunks layout without a tokenizer: the read side leaves the ids as they are."""

    name, features, ordered, records, counted = "chunks", {"token_ids": 4}, False, "int32", None

    @staticmethod
    def batches(dataset):
        return dataset.batch(3, drop_remainder=True)


def _write_shards(directory, shards):
    records = []
    for index, values in enumerate(shards):
        path = prepare.shard_path(directory, index)
        with tf.io.TFRecordWriter(path) as writer:
            for value in values:
                writer.write(prepare.record_bytes({"token_ids": [value] * 4},
                                                  _Chunks.features))
        records.append({"file": os.path.basename(path), "examples": len(values)})
    return {"shards": records}


def test_resume_mid_epoch_continues_with_the_next_batch_and_epochs_reshuffle(tmp_path):
    manifest = _write_shards(str(tmp_path), [range(0, 10), range(10, 20), range(20, 30)])
    data = prepared_input.PreparedInput(str(tmp_path), manifest, _Chunks, 3, seed=1,
                                        worker=0, workers=1)
    stream = [b["token_ids"][:, 0] for b in data.at_step(0).take(25).as_numpy_iterator()]
    first_epoch = np.concatenate(stream[:10])
    assert sorted(first_epoch) == list(range(30))  # each example once per epoch
    assert not np.array_equal(first_epoch, np.concatenate(stream[10:20]))  # reshuffled
    for step in (4, 11, 13):  # mid-epoch, and in the second epoch
        resumed = [b["token_ids"][:, 0] for b in data.at_step(step).take(5).as_numpy_iterator()]
        np.testing.assert_array_equal(np.concatenate(resumed),
                                      np.concatenate(stream[step:step + 5]))
    assert data.position(13) == {"step": 13, "epoch": 1, "example": 9}


def test_workers_read_disjoint_files_that_cover_every_shard(tmp_path):
    manifest = _write_shards(str(tmp_path), [range(i * 10, i * 10 + 9) for i in range(5)])
    seen = []
    for worker in range(2):
        data = prepared_input.PreparedInput(str(tmp_path), manifest, _Chunks, 4,
                                            worker=worker, workers=2)
        seen.append(set(data.files))
        # tf.distribute gives each worker's replicas half of every global batch.
        assert data.position(3) == {"step": 3, "epoch": 0, "example": 6}
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 5
    with pytest.raises(ValueError, match="cannot be split over 6 workers"):
        prepared_input.PreparedInput(str(tmp_path), manifest, _Chunks, 6, worker=0, workers=6)
    with pytest.raises(ValueError, match="multiple of the 2 workers"):
        prepared_input.PreparedInput(str(tmp_path), manifest, _Chunks, 3, worker=0, workers=2)


def test_plan_cuts_shards_at_document_boundaries(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("".join(f"doc {i} sentence one.\nsentence two.\n\n" for i in range(100)))
    plan = prepare.plan_shards([str(path)], shard_bytes=200)
    data = path.read_bytes()
    assert plan[0][1] == 0 and plan[-1][2] == len(data)
    assert all(a[2] == b[1] for a, b in zip(plan, plan[1:]))
    assert all(data[end - 2:end] == b"\n\n" for _, _, end in plan[:-1])


_SCRIPT = """
import sys
from keras_ctx.data.prepare import prepare
if __name__ == "__main__":
    prepare("bert-tiny", sys.argv[1], sys.argv[2], sequence_length=32,
            vocabulary_size=400, workers=1, shard_bytes=20_000)
"""


@pytest.mark.slow  # three preparations in TensorFlow processes: ~2-4 min on 2 cores
def test_kill_9_during_preparation_resumes_to_identical_shards(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join("\n".join(d) + "\n\n" for d in corpora.builtin_documents()[:600]))
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)

    def run(out, kill_after_shards=None):
        process = subprocess.Popen([sys.executable, str(script), str(corpus), str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if kill_after_shards is None:
            assert process.wait(timeout=600) == 0
            return prepare.load_manifest(str(out))
        def finished():
            return len([f for f in os.listdir(out) if f.startswith("shard-")
                        and f.endswith(".json")]) if os.path.isdir(out) else 0

        while finished() < kill_after_shards:
            assert process.poll() is None, "finished before it could be killed"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    whole = run(tmp_path / "whole")
    assert len(whole["shards"]) >= 4
    run(tmp_path / "killed", kill_after_shards=2)
    assert not os.path.isfile(tmp_path / "killed" / "manifest.json")
    resumed = run(tmp_path / "killed")
    assert [s["sha256"] for s in resumed["shards"]] == [s["sha256"] for s in whole["shards"]]
    assert resumed["examples"] == whole["examples"]


# ---------------------------------------------------------------- static masks (BERT)

_WORDS = [f"w{i}" for i in range(60)]


def _tiny_wordpiece():
    import keras_hub

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_WORDS]
    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False)


def _random_docs(count=60, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, 65, int(rng.integers(3, 12))).astype(np.int32)
             for _ in range(int(rng.integers(2, 7)))] for _ in range(count)]


def _mask_statistics(rows):
    """(selection rate over real tokens, [MASK] / random / unchanged shares, per-row budget ok)."""
    selected = masked = randomised = unchanged = candidates = 0
    budget_ok = True
    for row in rows:
        weights = np.asarray(row["mask_weights"]) > 0
        positions = np.asarray(row["mask_positions"])[weights]
        original = np.array(row["token_ids"])
        original[positions] = np.asarray(row["mask_ids"])[weights]
        # Never [PAD], [CLS], [SEP] or [MASK]; [UNK] (1) may be masked, as the script does.
        assert not np.isin(original[positions], (0, 2, 3, 4)).any()
        # create_pretraining_data.py: round(0.15 * len(tokens)), [CLS] and [SEP] counted.
        n = int(np.asarray(row["padding_mask"]).sum())
        budget_ok &= len(set(positions)) == len(positions) == max(1, round(0.15 * n))
        budget_ok &= (np.diff(positions) > 0).all()  # sorted, as the script writes them
        new = np.asarray(row["token_ids"])[positions]
        old = original[positions]
        selected, candidates = selected + len(positions), candidates + n
        masked += int((new == 4).sum())
        unchanged += int((new == old).sum())
        randomised += int(((new != 4) & (new != old)).sum())
    return (selected / candidates,
            np.array([masked, randomised, unchanged]) / selected, budget_ok, selected)


def test_bert_prepared_masks_statically_with_dupe_factor_and_todays_statistics():
    from keras_ctx import families

    tokenizer, docs = _tiny_wordpiece(), _random_docs()
    run = Run("bert-tiny", 8, 32, tokenizer.vocabulary_size(), 0)
    layout = families.get("bert").prepared(tokenizer, run)
    assert layout.name == "nsp_static"
    assert set(layout.features) == {"token_ids", "segment_ids", "padding_mask",
                                    "next_sentence_labels", "mask_positions", "mask_ids",
                                    "mask_weights"}
    rows = list(layout.examples(docs, np.random.default_rng([0, 0])))
    single = list(segments.pair_examples("nsp", docs, 32, 2, 3, 0,
                                         rng=np.random.default_rng([0, 0])))
    # dupe_factor 10 (BERT's create_pretraining_data.py): ten passes of instances.
    assert 8 * len(single) < len(rows) < 12 * len(single)
    for row in rows:
        for name, length in layout.features.items():
            assert np.shape(row[name]) == ((length,) if length else ())
    rate, split, budget_ok, count = _mask_statistics(rows)
    # The reference numbers of tests/data/test_masking.py: 15%, 80 / 10 / 10.
    assert budget_ok and abs(rate - 0.15) < 0.01
    tolerance = 4 * np.sqrt(0.1 * 0.9 / count)
    np.testing.assert_allclose(split, [0.8, 0.1, 0.1], atol=tolerance + 1 / 60)
    # Today's in-memory pipeline with static masks, on the same documents.
    ids = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    memory = pipelines.bert_dataset(docs, None, 8, sequence_length=32, duplicate=10,
                                    special_ids=ids, vocabulary_size=65)
    memory_rows = [{k: v[i] for k, v in batch.items()} for batch in memory.as_numpy_iterator()
                   for i in range(8)]
    memory_rate, memory_split, memory_ok, _ = _mask_statistics(memory_rows)
    assert memory_ok and abs(rate - memory_rate) < 0.01
    np.testing.assert_allclose(split, memory_split, atol=2 * tolerance + 1 / 60)
    # Copies of an instance carry different masks: the masked rows are not repeated.
    assert len({r["token_ids"].tobytes() for r in rows}) > 0.95 * len(rows)


def test_static_masks_are_written_once_and_read_back_unchanged_every_epoch(tmp_path):
    from keras_ctx import families

    tokenizer = _tiny_wordpiece()
    run = Run("bert-tiny", 4, 24, tokenizer.vocabulary_size(), 0)
    layout = families.get("bert").prepared(tokenizer, run)
    rng = np.random.default_rng(1)
    text = "".join(" ".join(rng.choice(_WORDS, 6)) + ".\n" + ("\n" if i % 4 == 3 else "")
                   for i in range(200))
    (tmp_path / "corpus.txt").write_text(text)
    prepare._WORKER.update(layout=layout, tokenize=prepare._graph_tokenize(tokenizer))
    try:
        record = prepare._prepare_shard(str(tmp_path), 0, str(tmp_path / "corpus.txt"), 0,
                                        len(text), seed=0)
    finally:
        prepare._WORKER.clear()
    data = prepared_input.PreparedInput(str(tmp_path), {"shards": [record]}, layout, 4,
                                        worker=0, workers=1)
    per_epoch = record["examples"] // 4
    assert per_epoch > 20
    stream = list(data.at_step(0).take(2 * per_epoch + 2).as_numpy_iterator())
    assert stream[0]["mask_weights"].dtype == np.float32
    assert stream[0]["mask_positions"].shape == (4, 4)  # ceil(0.15 * 24) slots

    def by_row(batches):
        return {tuple(b["token_ids"][i]): (tuple(b["mask_positions"][i]),
                                            tuple(b["mask_ids"][i]))
                for b in batches for i in range(4)}

    first, second = by_row(stream[:per_epoch]), by_row(stream[per_epoch:2 * per_epoch])
    shared = set(first) & set(second)
    assert len(shared) > 0.5 * len(first)  # the same masked rows, reshuffled
    assert all(first[key] == second[key] for key in shared)
    rate, split, budget_ok, _ = _mask_statistics(
        [{k: v[i] for k, v in b.items()} for b in stream[:per_epoch] for i in range(4)])
    assert budget_ok and abs(rate - 0.15) < 0.03


# ---------------------------------------------------------------- XLNet

def _xlnet_tokenizer():
    import keras_hub

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<eod>", *_WORDS]
    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False)


def test_xlnet_prepared_rows_equal_the_in_memory_stream_and_read_in_order(tmp_path):
    from keras_ctx import families
    from keras_ctx.data import xlnet_stream

    tokenizer = _xlnet_tokenizer()
    run = Run("xlnet-base-cased", 4, 16, tokenizer.vocabulary_size(), 3)
    layout = families.get("xlnet").prepared(tokenizer, run)
    assert layout.ordered
    docs = [[s + 1 for s in doc] for doc in _random_docs(40, seed=2)]  # ids 6.., not <eod>
    rows = list(layout.examples(docs, np.random.default_rng([3, 0])))
    ragged = tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in docs),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, ragged_rank=1))
    stream = list(xlnet_stream.two_segment_stream(
        ragged, 16, 4, 3, 2, eod_id=5, word_starts=xlnet_stream.xlnet_word_starts(tokenizer),
        shard_tokens=1 << 30, seed=3).take(100).as_numpy_iterator())
    assert len(rows) == 4 * len(stream) > 20
    for index, batch in enumerate(stream):  # XLNet's create_tfrecords order, row by row
        for row in range(4):
            example = rows[4 * index + row]
            assert example["row"] == row
            for name, value in batch.items():
                np.testing.assert_array_equal(example[name], value[row], err_msg=name)
    # Written and read back: whole batches in order, permutation masks added when read.
    path = prepare.shard_path(str(tmp_path), 0)
    with tf.io.TFRecordWriter(path) as writer:
        for example in rows:
            writer.write(prepare.record_bytes(example, layout.features))
    manifest = {"shards": [{"file": os.path.basename(path), "examples": len(rows)}],
                "features": layout.features}
    data = prepared_input.PreparedInput(str(tmp_path), manifest, layout, 4, seed=3,
                                        worker=0, workers=1)
    read = list(data.at_step(2).take(3).as_numpy_iterator())
    for offset, batch in enumerate(read):
        np.testing.assert_array_equal(batch["token_ids"], stream[2 + offset]["token_ids"])
        assert batch["perm_mask"].shape == (4, 16, 16)
        # Targets are the written span targets (`is_masked`), at most num_predict a row.
        weights = batch["target_weights"]
        assert (weights.sum(1) >= 1).all() and (weights.sum(1) <= 2).all()
        targets = batch["target_mapping"].argmax(-1)
        assert (np.take_along_axis(batch["is_masked"], targets, 1)[weights > 0] == 1).all()
    with pytest.raises(ValueError, match="train it on one worker"):
        prepared_input.PreparedInput(str(tmp_path), manifest, layout, 4, worker=0, workers=2)
    # Another batch size than the rows were cut for fails loudly.
    other = prepared_input.PreparedInput(
        str(tmp_path), manifest, dataclasses_replace_batches(layout, tokenizer, 2), 2,
        worker=0, workers=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="another batch size"):
        list(other.at_step(1).take(2).as_numpy_iterator())


def dataclasses_replace_batches(layout, tokenizer, batch):
    from keras_ctx import families

    return families.get("xlnet").prepared(
        tokenizer, Run("xlnet-base-cased", batch, 16, tokenizer.vocabulary_size(), 3))


# ---------------------------------------------------------------- ELMo

def test_elmo_prepared_sentences_are_text_read_as_the_bilm_pipeline_reads_them(tmp_path):
    from keras_ctx import families
    from keras_ctx.data.vocabulary import bilm_inputs, word_vocabulary

    text = "".join(f"w{i % 7} w{i % 5} w{i % 3}.\nline {i} ü.\n\n" for i in range(30))
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    sentences = [line for line in text.split("\n") if line]
    vocabulary = word_vocabulary(sentences, 20)
    run = Run("elmo-small", 4, 8, 20, 0)
    layout = families.get("elmo").prepared(vocabulary, run)
    assert layout.records == "text"
    prepare._WORKER.update(layout=layout, tokenize=layout.tokenize)
    try:
        record = prepare._prepare_shard(str(tmp_path), 0, str(tmp_path / "corpus.txt"), 0,
                                        len(text.encode("utf-8")), seed=0)
    finally:
        prepare._WORKER.clear()
    assert record["examples"] == len(sentences) == 60
    # The vocabulary is what `pretrain --data` loads back for ELMo (no keras-hub tokenizer).
    (tmp_path / "tokenizer.json").write_text(json.dumps({"run_files": {"vocabulary":
                                                                        vocabulary}}))
    assert prepare.load_tokenizer(str(tmp_path)) == vocabulary
    data = prepared_input.PreparedInput(str(tmp_path), {"shards": [record]}, layout, 4,
                                        worker=0, workers=1)
    read = list(data.at_step(0).take(15).as_numpy_iterator())
    characters = np.concatenate([b["character_ids"] for b in read])
    words = np.concatenate([b["token_ids"] for b in read])
    expected = bilm_inputs(tf.constant(sentences), vocabulary, 8)
    # Each sentence once per epoch, shuffled, with the in-memory pipeline's inputs.
    order = {row.tobytes(): i for i, row in enumerate(expected["character_ids"].numpy())}
    index = [order[row.tobytes()] for row in characters]
    assert sorted(index) == list(range(60)) and index != list(range(60))
    np.testing.assert_array_equal(words, expected["token_ids"].numpy()[index])


def test_static_whole_word_ngram_masks_as_albert_writes_them():
    # google-research/albert create_pretraining_data.py: SOP pairs, masks drawn when
    # written (dupe_factor copies), whole-word n-grams; the slots are probed with a
    # vocabulary id (a whole-word masker looks every id up).
    from keras_ctx.data import layouts

    tokenizer, docs = _tiny_wordpiece(), _random_docs()
    run = Run("albert-base", 8, 32, tokenizer.vocabulary_size(), 0)
    layout = layouts.pairs_layout(tokenizer, run, kind="sop", duplicate=2, static_masking=True,
                                  whole_word_masking=True, max_ngram=3)
    assert layout.features["mask_positions"] == 5  # ceil(0.15 * 32)
    rows = list(layout.examples(docs, np.random.default_rng([0, 0])))
    for row in rows:
        used = row["mask_positions"][row["mask_weights"] > 0]
        assert 0 < len(used) <= max(1, round(0.15 * row["padding_mask"].sum()))
        assert (np.diff(used) > 0).all()
