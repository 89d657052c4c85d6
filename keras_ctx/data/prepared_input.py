"""Reading `keras-ctx prepare` shards: parallel, per-worker files, reshuffled, resumable.

`PreparedInput(data_dir, layout, batch_size, seed)` is what `pretrain --data`
trains on. Each worker of a MultiWorkerMirroredStrategy cluster (TF_CONFIG)
reads its own files (`worker_files`: file k goes to worker k mod N; no worker
reads everything). Epoch e reads the worker's files in an order drawn from
(seed, e), interleaved with parallel reads, and shuffles the examples in
blocks with stateless seeds (seed, e, block): a fresh order every epoch, the
same for a given seed. An `ordered` layout (XLNet) reads each file whole, in
the order written. `at_step(step)` starts the stream at the first
example batch `step` did not consume (the position `keras_ctx.training`
saves in each checkpoint), so a resumed run continues with the next unseen
batch instead of restarting its epoch.
"""

import json
import os

from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.data import token_counts as counts

SHUFFLE_BLOCK = 10_000  # examples shuffled together (keras_ctx's choice)
_READERS = 8  # files read at once


def worker_of_cluster():
    """(worker index, number of workers) from TF_CONFIG; (0, 1) outside a cluster."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster, task = config.get("cluster", {}), config.get("task", {})
    readers = [role for role in ("chief", "worker") if role in cluster]
    if not readers:
        return 0, 1
    order = [(role, i) for role in readers for i in range(len(cluster[role]))]
    return order.index((task.get("type"), task.get("index", 0))), len(order)


def worker_files(files, worker, workers):
    """The files worker `worker` of `workers` reads (file k -> worker k mod N)."""
    if workers > len(files):
        raise ValueError(f"{len(files)} shard files cannot be split over {workers} workers; "
                         "prepare with a smaller --shard-mb (more shards).")
    return files[worker::workers]


class PreparedInput:
    """The endless, resumable batches of a prepared directory for one worker.

    Args:
        data_dir: a `keras-ctx prepare` output.
        manifest: its checked manifest (`prepare.load_manifest`).
        layout: the family's `Layout` (how examples are parsed and batched).
        batch_size: examples per batch of this worker's stream.
        seed: the shuffling seed.
        worker, workers: default `worker_of_cluster()`.
    """

    def __init__(self, data_dir, manifest, layout, batch_size, seed=0, worker=None,
                 workers=None):
        if worker is None:
            worker, workers = worker_of_cluster()
        if manifest.get("features", layout.features) != layout.features:
            raise ValueError(f"{data_dir} holds examples of {manifest['features']}, not the "
                             f"{layout.name} layout's {layout.features}; prepare it again.")
        if layout.ordered and workers > 1:
            # tf.distribute would hand each worker a slice of a different row block each
            # step, breaking the row-to-row continuation (Transformer-XL's memory).
            raise ValueError(f"The {layout.name} layout's rows continue from batch to batch, "
                             "which a split over workers breaks; train it on one worker "
                             "(any number of devices).")
        shards = worker_files(manifest["shards"], worker, workers)
        self.files = [os.path.join(data_dir, s["file"]) for s in shards]
        self.examples_per_epoch = sum(s["examples"] for s in shards)
        if self.examples_per_epoch < batch_size:
            raise ValueError(f"Worker {worker} has {self.examples_per_epoch} examples, fewer "
                             f"than one batch of {batch_size}; prepare more text.")
        if batch_size % workers:
            raise ValueError(f"The batch size {batch_size} must be a multiple of the "
                             f"{workers} workers (each takes an equal share of every batch).")
        if layout.counted is not None:  # the corpus' token counts prepare recorded
            layout = layout.counted(manifest.get(counts.MANIFEST_KEY), data_dir)
        self.layout, self.batch_size, self.seed = layout, batch_size, seed
        # tf.distribute splits each global batch over the replicas of all workers
        # (keras' fit rebatches the input), so a worker's stream advances by its share.
        self.rows_per_step = batch_size // workers

    def position(self, step):
        """Where this worker's stream stands after `step` batches: {"epoch", "example", "step"}."""
        consumed = step * self.rows_per_step
        return {"step": step, "epoch": consumed // self.examples_per_epoch,
                "example": consumed % self.examples_per_epoch}

    def _parse(self, records):
        """A batch of raw records (`prepare.record_bytes`) -> {feature: int32 tensor}."""
        if self.layout.records == "text":  # `prepare.text_record`: the text itself
            (name,) = self.layout.features
            return {name: records}
        total = sum(max(length, 1) for length in self.layout.features.values())
        # A static row length: the features keep static shapes (XLA, XLNet's masks).
        values = tf.reshape(tf.io.decode_raw(records, tf.int32, little_endian=True),
                            [-1, total])
        parsed, start = {}, 0
        for name, length in self.layout.features.items():
            parsed[name] = values[:, start] if not length else values[:, start:start + length]
            start += max(length, 1)
        return parsed

    def epoch(self, epoch):
        """The examples (parsed, unbatched) of one epoch, in that epoch's order."""
        files = tf.constant(self.files)
        order = tf.random.experimental.stateless_shuffle(
            files, seed=tf.stack([tf.cast(self.seed, tf.int64), epoch]))
        if self.layout.ordered:  # each file whole, in the order written (XLNet)
            return tf.data.TFRecordDataset(order, buffer_size=8 << 20)
        records = tf.data.Dataset.from_tensor_slices(order).interleave(
            tf.data.TFRecordDataset, cycle_length=min(_READERS, len(self.files)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        blocks = records.batch(SHUFFLE_BLOCK).enumerate()

        def shuffle(block, records):
            seed = tf.stack([tf.cast(self.seed, tf.int64) * 1_000_003 + epoch, block])
            return tf.random.experimental.stateless_shuffle(records, seed=seed)

        return blocks.map(shuffle).unbatch()

    def at_step(self, step):
        """The batches from the first one that `step` steps did not consume, endless."""
        where = self.position(step)
        first, skip = where["epoch"], where["example"]
        examples = tf.data.Dataset.range(first, 1 << 62).flat_map(
            lambda e: self.epoch(e).skip(tf.where(e == first, tf.constant(skip, tf.int64),
                                                  tf.constant(0, tf.int64))))
        examples = examples.batch(256).map(self._parse, num_parallel_calls=tf.data.AUTOTUNE,
                                           deterministic=True).unbatch()
        options = tf.data.Options()
        # Files are split by worker here; tf.distribute must not split them again.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        return self.layout.batches(examples).with_options(options)

    @property
    def element_spec(self):
        return self.at_step(0).element_spec
