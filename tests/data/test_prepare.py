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

    name, features = "chunks", {"token_ids": 4}

    @staticmethod
    def batches(dataset):
        return dataset.batch(3, drop_remainder=True)


def _write_shards(directory, shards):
    records = []
    for index, values in enumerate(shards):
        path = prepare.shard_path(directory, index)
        with tf.io.TFRecordWriter(path) as writer:
            for value in values:
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "token_ids": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[value] * 4))})).SerializeToString())
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
        data = prepared_input.PreparedInput(str(tmp_path), manifest, _Chunks, 3,
                                            worker=worker, workers=2)
        seen.append(set(data.files))
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 5
    with pytest.raises(ValueError, match="cannot be split over 6 workers"):
        prepared_input.PreparedInput(str(tmp_path), manifest, _Chunks, 3, worker=0, workers=6)


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
