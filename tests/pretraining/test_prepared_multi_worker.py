"""MultiWorkerMirroredStrategy over prepared shards: each worker reads its own files, and
the replicas together consume every example of an epoch once (two processes on 127.0.0.1)."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_ctx.data import prepare
from tests.pretraining.workers import ROOT, free_ports

pytestmark = pytest.mark.tensorflow_only(
    "tf.distribute.MultiWorkerMirroredStrategy distributing the prepared input")

SHARDS, PER_SHARD, BATCH = 4, 12, 4  # BATCH: the global batch, as `pretrain --batch-size`

# Reads STEPS global batches the way keras' fit does (the strategy distributes the
# input) and prints which files this worker opened and which examples its replica got.
WORKER = r"""
import json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from keras_ctx import training
from keras_ctx.data import prepared_input

class Layout:
    name, features, ordered, records, counted = "chunks", {"token_ids": 4}, False, "int32", None

    @staticmethod
    def batches(dataset):
        return dataset.batch(int(sys.argv[3]), drop_remainder=True)

manifest = json.loads(sys.argv[2])
data = prepared_input.PreparedInput(sys.argv[1], manifest, Layout, int(sys.argv[3]))


def read(step, steps):
    with strategy.scope():
        source, _ = training.positioned_input(data, step)
        if not isinstance(source, tf.distribute.DistributedDataset):
            source = strategy.experimental_distribute_dataset(source)  # as keras' fit does
    seen, iterator = [], iter(source)
    for _ in range(steps):
        batch = next(iterator)
        for rows in strategy.experimental_local_results(batch["token_ids"]):
            seen += rows[:, 0].numpy().tolist()
    return seen


print(json.dumps({"files": data.files, "seen": read(0, int(sys.argv[4])),
                  "resumed": read(3, 3), "replicas": strategy.num_replicas_in_sync}))
"""


def _shards(directory):
    records = []
    for index in range(SHARDS):
        path = prepare.shard_path(directory, index)
        with tf.io.TFRecordWriter(path) as writer:
            for value in range(index * 100, index * 100 + PER_SHARD):
                writer.write(prepare.record_bytes({"token_ids": [value] * 4}, {"token_ids": 4}))
        records.append({"file": os.path.basename(path), "examples": PER_SHARD})
    return {"shards": records}


@pytest.mark.slow  # two TensorFlow processes talking gRPC: ~1 min on 2 cores
def test_two_workers_read_disjoint_files_and_consume_every_example_once(tmp_path):
    manifest = _shards(str(tmp_path))
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    steps = SHARDS * PER_SHARD // BATCH  # one epoch of the whole data, global batches
    processes = []
    for index in range(2):
        env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3",
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                         "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), json.dumps(manifest), str(BATCH),
             str(steps)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    results = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["replicas"] for r in results] == [2, 2]
    files = [set(r["files"]) for r in results]
    assert not files[0] & files[1] and len(files[0] | files[1]) == SHARDS
    # Every example of the epoch reached exactly one replica: none lost, none twice.
    seen = results[0]["seen"] + results[1]["seen"]
    everything = [s * 100 + i for s in range(SHARDS) for i in range(PER_SHARD)]
    assert sorted(seen) == everything
    share = BATCH // 2  # rows of its own files a worker's replica takes each step
    for result, own in zip(results, files):  # and each worker only from its own files
        shards = {int(os.path.basename(f)[6:11]) for f in own}
        assert {value // 100 for value in result["seen"]} == shards
        # Resumed at step 3 (a checkpoint's input position): the next unseen rows.
        assert result["resumed"] == result["seen"][3 * share:6 * share]
