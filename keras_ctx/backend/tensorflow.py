"""keras_ctx on Keras' TensorFlow backend (keras_ctx.backend's names; see its docstring).

- The layers' implementations: `tf_ops` (XLA:CPU rewrites, Philox dropout bits,
  summed IndexedSlices rows, checks that hold inside graphs, the LSTM's backward).
- The Pretrainer's step: GradientTape + tf.distribute. Under a strategy the step
  runs once per replica on its share of the global batch and the optimizer sums
  the replicas' gradients: the loss is divided by `num_replicas()`, and weighted
  means divide by the global batch's weight total (`replicas_mean`), so that N
  replicas give the one-device update.
- The tasks' step: Keras' own; AdamW's decay per layer group through tf.distribute.
- Generation: stateless Philox draws, while-loop shapes, `tf.function`.
- Export: the model runs in the serving graph itself (XLA-compiled on request).
"""

import contextlib
import os

import keras
import tensorflow as tf

from keras_ctx.backend.tf_ops import (  # noqa: F401  (the backend's names)
    check_at_most,
    check_token_ids,
    cudnn_lstm,
    dropout,
    fused_attention,
    gpu_available,
    recurrence,
    scan_states,
    summed_rows,
    take_rows,
    update_positions,
)
from keras_ctx.common import compat


def check_xla(strategy, jit_compile):
    """Raises a clear error where TensorFlow cannot jit-compile the step under `strategy`.

    MirroredStrategy over several CPU devices of one process (logical CPUs)
    with jit_compile=True fails inside TensorFlow, with Keras or without it:
    XLA runs every replica's cluster on the first CPU, which cannot read the
    other replicas' variables ("Trying to access resource ... located in
    device CPU:1 from device CPU:0", XLA known issue "tf.Variable on a
    different device"). One device per replica on GPUs/TPUs is not affected.
    `keras-ctx pretrain --xla auto` (recipes.use_xla) keeps XLA off on CPU.
    """
    if jit_compile is not True or strategy.num_replicas_in_sync == 1:
        return
    devices = strategy.extended.worker_devices
    if len(devices) > 1 and all("CPU" in d.upper() for d in devices):
        raise ValueError(
            f"jit_compile=True under {type(strategy).__name__} over {len(devices)} CPU "
            "devices fails inside TensorFlow (XLA places every replica on the first CPU; "
            "https://www.tensorflow.org/xla/known_issues#tfvariable_on_a_different_device). "
            "Compile with jit_compile=False here (--xla auto does), or use one GPU per replica.")


def make_strategy(name, batch_size=None):
    """A tf.distribute strategy by name (multi_worker reads TF_CONFIG); it splits any
    `batch_size` over its replicas."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("--strategy multi_worker needs the TF_CONFIG environment "
                             "variable describing the cluster and this worker's task.")
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def num_replicas():
    """Replicas whose gradients the optimizer sums (1 outside tf.distribute)."""
    return tf.distribute.get_strategy().num_replicas_in_sync


def replicas_mean(total):
    """The replicas' mean of a per-replica scalar `total` (no gradient; itself on one replica)."""
    context = tf.distribute.get_replica_context()
    replicas = num_replicas()
    if context is None or replicas == 1:
        return total
    return tf.stop_gradient(context.all_reduce("sum", total)) / replicas


def replica_rows(value, rows, axis):
    """This replica's `rows` rows (along `axis`) of a value that holds the global batch's."""
    if num_replicas() == 1:
        return value
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    begin, size = [0] * len(value.shape), [-1] * len(value.shape)
    begin[axis], size[axis] = replica * rows, rows
    return tf.slice(value, begin, size)


def gathered_rows(value, axis):
    """Every replica's `value` concatenated along `axis` in replica order (itself on one)."""
    if num_replicas() == 1:
        return value
    return tf.distribute.get_replica_context().all_gather(value, axis=axis)


@tf.custom_gradient
def flat_cross_entropy(logits, labels):
    """(N, V) float32 logits, (N,) int32 labels -> (N,) losses, with a sparse backward.

    dCE/dz = softmax(z) - onehot(y): the one-hot part is a scatter of one value
    per row, not a dense (N, V) one-hot or the gather's segment-sum gradient
    (652 ms of op time in a 1,456 ms GPT-2 step without XLA).
    """
    shifted = logits - tf.reduce_max(logits, axis=-1, keepdims=True)
    sum_exp = tf.reduce_sum(tf.exp(shifted), axis=-1, keepdims=True)
    label_index = tf.stack([tf.range(tf.shape(labels)[0]), labels], axis=1)
    losses = tf.math.log(sum_exp[:, 0]) - tf.gather_nd(shifted, label_index)

    def gradient(upstream):
        probabilities = tf.exp(shifted) / sum_exp
        return tf.tensor_scatter_nd_sub(probabilities * upstream[:, None], label_index,
                                        upstream), None

    return losses, gradient


class PretrainerStep:
    """The Pretrainer's `train_step(data)` / `test_step(data)` on TensorFlow (see
    pretraining/base.py)."""

    def compile(self, *args, **kwargs):
        if kwargs.get("jit_compile", "auto") == "auto":
            # XLA on GPU/TPU only: on CPU TensorFlow's oneDNN kernels beat it for
            # these models (benchmarks/RESULTS.md); Keras' "auto" also turns it off
            # under tf.distribute, where one device per replica compiles fine.
            kwargs["jit_compile"] = any(
                d.device_type in ("GPU", "TPU") for d in tf.config.list_physical_devices())
        # A clear error instead of TensorFlow's, where XLA cannot run under the strategy.
        check_xla(self.distribute_strategy, kwargs.get("jit_compile", "auto"))
        super().compile(*args, **kwargs)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras builds the model from one batch it reads, which starts a pass
        # over the data: a generator's next epoch (other NSP pairs, other
        # masks) would then train, and a mirrored run would see other data
        # than one device. Only shapes and dtypes matter: a tf.data input
        # builds from its spec (other adapters would copy their arrays again).
        # Keras reads even for a built model, so building first through public
        # APIs does not avoid it (common/compat.py, tests/common/test_compat.py).
        if iterator is not None and data_batch is None:
            dataset = compat.tf_dataset_of(compat.attribute(iterator, "data_adapter"))
            strategy = compat.attribute(self, "model_strategy")
            if dataset is not None:
                data_batch = dataset.element_spec
                iterator = None
            elif strategy is not None:
                # The read batch is merged by ONE strategy.reduce, which
                # MultiWorkerMirroredStrategy cannot do for a dict: take the
                # first replica's tensors.
                for _, _, it in iterator:
                    data_batch = tf.nest.map_structure(
                        lambda v: strategy.experimental_local_results(v)[0], next(it))
                    break
                iterator = None
        # Keras' private hook (keras_ctx.common.compat names it and the version it was
        # written for; resolving it here fails loudly if an upgrade removed it).
        compat.resolve("maybe_symbolic_build")
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def train_step(self, data):
        for batch in self.step_batches(self.unpack_batch(data)):
            results = self._update(batch)
        return results

    def _update(self, batch):
        with tf.GradientTape() as tape:
            total = self.total_loss(self.compute_losses(batch, training=True))
            # The optimizer sums the replicas' gradients: average the loss over them.
            scaled = self.optimizer.scale_loss(total / num_replicas())
        # Asked after the forward pass, which builds lazily built heads.
        variables = self.step_variables(batch)
        if not self.optimizer.built:
            # Every trainable variable, as Keras builds it under a strategy: updates
            # of subsets (ELECTRA's stages, CVT, an unused pooler) share one
            # optimizer, and a checkpoint restores into the same variables.
            self.optimizer.build(self.trainable_variables)
        # A lookup's gradient repeats a row once per read; Keras' Adam squares each
        # repeat apart (keras_ctx/layers/lookup.py): sum them, whatever layer read the table.
        gradients = [summed_rows(g) for g in tape.gradient(scaled, variables)]
        # A step variable the loss does not read (one its objective did not name in
        # `unread_weights`) has none: left alone, as Keras' own step leaves it.
        used = [(g, v) for g, v in zip(gradients, variables) if g is not None]
        self.optimizer.apply([g for g, _ in used], [v for _, v in used])
        return self._results(total)

    def test_step(self, data):
        return self._results(self.total_loss(self.evaluation_losses(self.unpack_batch(data))))

    def _results(self, total):
        self.loss_tracker.update_state(total)
        results = {m.name: m.result() for m in self.metrics}
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 merges the workers' logs with strategy.reduce("MEAN", axis=0),
            # which fails on scalars: give each value the batch axis it expects.
            results = {name: value[None] for name, value in results.items()}
        return results


def state_kept(model):
    """Nothing to keep: the variables hold their values through a refused call."""
    return contextlib.nullcontext()


# -- the tasks (keras_ctx.tasks) ---------------------------------------------------------


class TaskStep:
    """Keras' own train step (TensorFlow's optimizer applies to any trainable subset)."""


def check_unfreezing(model):
    """Every model's step follows a changing trainable set here."""


def decay_weights(optimizer, variables, factor_of):
    """AdamW's decoupled decay, w -= w * wd * lr * factor_of(w), per tf.distribute replica
    set (Keras' private hooks, named with their pinned versions in common/compat.py)."""
    use_weight_decay = compat.bound(optimizer, "use_weight_decay")

    def apply(distribution, variables):
        def decay(variable):
            if use_weight_decay(variable):
                lr = tf.cast(optimizer.learning_rate, variable.dtype) * factor_of(variable)
                variable.assign_sub(variable * tf.cast(optimizer.weight_decay,
                                                       variable.dtype) * lr)

        for variable in variables:
            if isinstance(variable, keras.Variable):
                variable = variable.value
            distribution.extended.update(variable, decay, group=False)

    compat.resolve("maybe_merge_call")(
        apply, compat.attribute(optimizer, "distribution_strategy"), variables)


STRINGS_REFUSAL = None  # string-in tasks tokenize inside tf.data maps, on this backend


# -- generation (keras_ctx.generation) ---------------------------------------------------


def categorical(logits, seed, step):
    """One draw per row from softmax(logits), seeded by (seed, step)."""
    seeds = tf.stack([tf.cast(seed, tf.int32), tf.cast(step, tf.int32)])
    return tf.random.stateless_categorical(logits, 1, seeds, dtype=tf.int32)[:, 0]


def keep_shapes(new, old):
    """`new` with each tensor given its loop-entry shape (a TF while-loop's invariant)."""
    for tensor, before in zip(tf.nest.flatten(new), tf.nest.flatten(old)):
        tensor.set_shape(before.shape)
    return new


def auto_jit_compile(rows, float32_weights):
    """XLA, except one row of float32 weights without an accelerator (a TF graph is
    faster there; `keras_ctx.generation.resolve_jit_compile`)."""
    if rows > 1 or any(d.device_type != "CPU" for d in tf.config.list_logical_devices()):
        return True
    return not float32_weights


def compile_function(backbone, function, jit_compile):
    """`function(*tensors)` as a TF graph, compiled by XLA when `jit_compile`."""
    return tf.function(function, jit_compile=jit_compile)


# -- export (keras_ctx.export) -----------------------------------------------------------


def export_refusal(specs, generation):
    """None: TensorFlow exports everything (a free length, `serve_generate`)."""
    return None


def compiled_forward(forward, jit_compile):
    """`forward`, XLA-compiled when asked."""
    return tf.function(forward, jit_compile=True) if jit_compile else forward


def served_forward(archive, forward, specs):
    """The model runs in the serving graph itself."""
    return forward


def add_endpoint(archive, name, serve, input_signature):
    return archive.add_endpoint(name, serve, input_signature=input_signature)


def preprocessed(preprocessor, text):
    """serve_text's features: the preprocessor called on the string batch."""
    return preprocessor(text)


ONNX_CONVERTER = "tf2onnx"  # converts the serving graph; batch and length stay dynamic


def onnx_refusal(model, batch_size, sequence_length):
    """None: tf2onnx converts any model's graph, its shapes fixed or not."""
    return None
