"""keras_ctx on Keras' JAX backend (keras_ctx.backend's names; see its docstring).

The layers: `keras_ops` (keras.ops only). Generation: seeded draws and
`jax.jit` over the weights' values. Export: Keras' ExportArchive converts the
forward pass with jax2tf. The tasks: Keras' step with the optimizer applied to
the weights trainable now (`GradualUnfreezing` changes them between epochs).

The Pretrainer's step is one stateless function of the state.

Keras' JAX trainer compiles `train_step(state, data)` once, state = (trainable,
non-trainable, optimizer, metrics variables' values); nothing in it may change
a variable in place (Keras' guide "Customizing what happens in fit() with
JAX"). The objective's `compute_losses` runs in a `keras.StatelessScope` over
the state's values, and what it assigns (metrics, XLNet's memory, AWD-LSTM's
states and learning-rate scale, seed generators) comes back as the next state.

Data parallel (`keras.distribution.DataParallel`) compiles this one program
over the global batch, which the distribution shards: the loss and its
gradient are the global batch's, so there is no per-replica arithmetic here.
"""

import contextlib
import types

import jax
import keras
from keras import ops

from keras_ctx.backend import keras_ops
from keras_ctx.backend.keras_ops import (  # noqa: F401  (the backend's names)
    cudnn_lstm,
    dropout,
    flat_cross_entropy,
    fused_attention,
    gpu_available,
    recurrence,
    scan_states,
    summed_rows,
    take_rows,
    update_positions,
)
from keras_ctx.common import compat


@contextlib.contextmanager
def state_kept(model):
    """`model` usable after a refused or interrupted `fit`/`evaluate`/`predict`: Keras' JAX
    trainer moves the variables' values into its step state for the call (a refusal
    mid-stream left them empty: `get_weights` raised). On an error the last finished
    step's state is written back, and any value still missing is the one before the call."""
    # Keras' fit builds the optimizer and then empties every variable into its step state:
    # slots made inside a call refused before its first step would stay empty (the next
    # fit then failed in a Variable). Built here, as fit builds it, they are kept too.
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built and model.built:
        optimizer.build(model.trainable_variables)
    # The arrays (immutable: kept, not copied); a call inside another (fit's validation)
    # finds the outer call's variables already moved into its state: they stay with it.
    saved = [(v, compat.attribute(v, "variable_value")) for v in _all_variables(model)]
    try:
        yield
    except BaseException:
        model.jax_state_sync()
        for variable, value in saved:
            if value is not None and compat.attribute(variable, "variable_value") is None:
                variable.assign(value)
        raise


def _all_variables(model):
    optimizer = getattr(model, "optimizer", None)
    return [*model.variables, *model.metrics_variables,
            *(optimizer.variables if optimizer is not None and optimizer.built else ())]


def has_values(tensor):
    """False for a JAX tracer (inside `jax.jit`/`grad`): it has no value yet."""
    return not compat.is_traced(tensor)


check_token_ids, check_at_most = keras_ops.value_checks(has_values)


def make_strategy(name, batch_size=None):
    """`--strategy` as keras.distribution, set for the process (`fit` reads the global one).

    default: one device. mirrored: DataParallel over every device of JAX's default
    platform (GPUs, TPU cores, or CPUs). tpu: over TPU cores, which must exist.
    multi_worker names TensorFlow's cluster (TF_CONFIG) and is refused: several hosts
    run one process each that calls `jax.distributed.initialize()` first.
    DataParallel splits the global batch evenly: `batch_size` must divide.
    """
    if name == "default":
        return types.SimpleNamespace(scope=contextlib.nullcontext)
    if name == "multi_worker":
        raise ValueError(
            "--strategy multi_worker reads TensorFlow's cluster (TF_CONFIG); on JAX start "
            "one process per host that calls jax.distributed.initialize() before keras_ctx, "
            "with --strategy mirrored (docs/guides/jax-training.md).")
    platform = "tpu" if name == "tpu" else None
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        raise ValueError(f"--strategy tpu found no TPU: JAX sees {jax.devices()[0].platform} "
                         "devices only; use --strategy mirrored.") from None
    if batch_size is not None and batch_size % len(devices):
        raise ValueError(
            f"--batch-size {batch_size} does not split evenly over the {len(devices)} devices "
            f"of --strategy {name} on JAX: give a multiple of {len(devices)}.")
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    return distribution


def num_replicas():
    """1: the step is one program over the global batch."""
    return 1


def replicas_mean(total):
    return total


def replica_rows(value, rows, axis):
    return value


def gathered_rows(value, axis):
    return value


def _current(scope, variables):
    # Every variable read here is in the scope's mapping: a purged one (fit
    # keeps the values in the state) would read as its initializer.
    return [scope.get_current_value(v) for v in variables]


def apply_optimizer(model, state, gradients, variables):
    """`model.optimizer.apply(gradients, variables)` over the step's state, stateless.

    `state` = (trainable, non-trainable, optimizer values) of `model`'s variables;
    returns the new (trainable, optimizer) values. One `keras.StatelessScope` maps
    every variable, not only what `optimizer.stateless_apply` maps: a learning rate
    that reads model state (AWD-LSTM's `learning_rate_scale`, set by the forward
    pass) sees the step's value. `variables` may be any subset of those the
    optimizer was built with (frozen weights, a minibatch's unread ones, a stage
    of ELECTRA's), as on TensorFlow; Keras refuses a variable it was not built
    with (`GradualUnfreezing` builds it with every weight it will unfreeze).
    """
    trainable, non_trainable, optimizer_values = state
    optimizer = model.optimizer
    mapping = [*zip(model.trainable_variables, trainable),
               *zip(model.non_trainable_variables, non_trainable),
               *zip(optimizer.variables, optimizer_values)]

    def applied(apply):
        with keras.StatelessScope(state_mapping=mapping) as scope:
            apply()
        return (_current(scope, model.trainable_variables),
                _current(scope, optimizer.variables))

    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return applied(lambda: optimizer.apply(gradients, variables))
    # mixed_float16: the LossScaleOptimizer's rule on its public state (its own `apply`
    # branches with a stateful `cond`, which JAX cannot trace): finite gradients are
    # unscaled and applied, and the scale doubles after `dynamic_growth_steps` of them;
    # otherwise nothing is applied and the scale halves.
    loss_scale, counter = optimizer.dynamic_scale, optimizer.step_counter

    def finite():
        optimizer.inner_optimizer.apply(
            [ops.divide(g, loss_scale.value) for g in gradients], variables)
        grow = ops.equal(counter.value, optimizer.dynamic_growth_steps - 1)
        counter.assign(ops.where(grow, 0, counter.value + 1))
        loss_scale.assign(ops.where(grow, loss_scale.value * 2.0, loss_scale.value))

    def not_finite():
        counter.assign(0)
        loss_scale.assign(loss_scale.value * 0.5)

    return ops.cond(optimizer.check_finite(gradients), lambda: applied(finite),
                    lambda: applied(not_finite))


class PretrainerStep(keras_ops.BuiltFromSpec):
    """The Pretrainer's `train_step(state, data)` / `test_step(state, data)` on JAX."""

    def _scope(self, trainable, non_trainable, metrics, optimizer=None):
        mapping = [*zip(self.trainable_variables, trainable),
                   *zip(self.non_trainable_variables, non_trainable),
                   *zip(self.metrics_variables, metrics)]
        if optimizer is not None:  # the loss scale of a LossScaleOptimizer
            mapping += zip(self.optimizer.variables, optimizer)
        return keras.StatelessScope(state_mapping=mapping)

    def train_step(self, state, data):
        for batch in self.step_batches(self.unpack_batch(data)):
            logs, state = self._update(state, batch)
        return logs, state

    def _update(self, state, batch):
        trainable, non_trainable, optimizer, metrics = state
        variables = self.step_variables(batch)
        index = {id(v): i for i, v in enumerate(self.trainable_variables)}
        stepped = [index[id(v)] for v in variables]

        def loss(stepped_values, trainable, non_trainable, metrics):
            values = list(trainable)
            for i, value in zip(stepped, stepped_values):
                values[i] = value
            with self._scope(values, non_trainable, metrics, optimizer) as scope:
                total = self.total_loss(self.compute_losses(batch, training=True))
                scaled = self.optimizer.scale_loss(total)
            return scaled, (total, _current(scope, self.non_trainable_variables),
                            _current(scope, self.metrics_variables))

        (_, (total, non_trainable, metrics)), gradients = jax.value_and_grad(
            loss, has_aux=True)([trainable[i] for i in stepped], trainable, non_trainable,
                                metrics)
        trainable, optimizer = apply_optimizer(
            self, (trainable, non_trainable, optimizer), gradients, variables)
        logs, metrics = self._results(total, metrics)
        return logs, (trainable, non_trainable, optimizer, metrics)

    def test_step(self, state, data):
        trainable, non_trainable, metrics = state
        with self._scope(trainable, non_trainable, metrics) as scope:
            total = self.total_loss(self.evaluation_losses(self.unpack_batch(data)))
        non_trainable = _current(scope, self.non_trainable_variables)
        logs, metrics = self._results(total, _current(scope, self.metrics_variables))
        return logs, (trainable, non_trainable, metrics)

    def _results(self, total, metrics):
        with keras.StatelessScope(state_mapping=list(zip(self.metrics_variables,
                                                         metrics))) as scope:
            self.loss_tracker.update_state(total)
            logs = {m.name: m.result() for m in self.metrics}
        return logs, _current(scope, self.metrics_variables)


# -- the tasks (keras_ctx.tasks) ---------------------------------------------------------


class TaskStep:
    """`train_step(state, data)` as Keras' JAX trainer writes it, but for the optimizer
    (any subset of the weights it was built with) and the weights a task does not read."""

    def train_step(self, state, data):
        trainable, non_trainable, optimizer, metrics = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        (_, (loss, y_pred, non_trainable, metrics)), gradients = jax.value_and_grad(
            self.compute_loss_and_updates, has_aux=True)(
                trainable, non_trainable, metrics, x, y, sample_weight, training=True,
                optimizer_variables=optimizer)
        # The weights the task's loss does not read get no update (as on TensorFlow).
        unread = {id(w) for w in self.unread_weights()}
        read = [(g, v) for g, v in zip(gradients, self.trainable_variables)
                if id(v) not in unread]
        trainable, optimizer = apply_optimizer(
            self, (trainable, non_trainable, optimizer), [g for g, _ in read],
            [v for _, v in read])
        logs, metrics = _task_metrics(self, metrics, loss, x, y, y_pred, sample_weight)
        return logs, (trainable, non_trainable, optimizer, metrics)


def _task_metrics(model, metrics, loss, x, y, y_pred, sample_weight):
    """What Keras' JAX step does after its update, on public APIs: its loss tracker (the
    metric named "loss", weighted by the batch's rows) and `compute_metrics`, over the
    step state's metric values; (logs, the new values)."""
    mapping = list(zip(model.metrics_variables, metrics))
    with keras.StatelessScope(state_mapping=mapping) as scope:
        rows = next(i for i in keras.tree.flatten(x) if i is not None).shape[0]
        for metric in model.metrics:
            if metric.name == "loss":
                metric.update_state(loss, sample_weight=rows)
        logs = model.compute_metrics(x, y, y_pred, sample_weight)
    return logs, _current(scope, model.metrics_variables)


def check_unfreezing(model):
    """Raises (one line) unless `model`'s JAX step follows a changing trainable set."""
    if not isinstance(model, (TaskStep, PretrainerStep)):
        raise ValueError(
            f"GradualUnfreezing on JAX needs a keras_ctx task or pretrainer: Keras' own "
            f"JAX step ({type(model).__name__}) updates only the weights its optimizer "
            "was built with. Subclass keras_ctx.tasks.Task, or fit on TensorFlow.")


decay_weights = keras_ops.decay_weights

# The string-in tasks (`keras_ctx.tasks.text`) tokenize inside tf.data maps, outside
# the compiled step (as keras-hub's preprocessors): Keras hands JAX the ids.
STRINGS_REFUSAL = None


# -- generation (keras_ctx.generation) ---------------------------------------------------


def categorical(logits, seed, step):
    """One draw per row from softmax(logits), seeded by (seed, step)."""
    key = jax.random.fold_in(jax.random.key(seed), step)
    return jax.random.categorical(key, logits, axis=-1).astype("int32")


def keep_shapes(new, old):
    return new  # JAX's shapes are static


def auto_jit_compile(rows, float32_weights):
    return True  # the loop is one XLA loop either way; jit adds the prefill and sampler


def compile_function(backbone, function, jit_compile):
    """`function(*arrays)`; with `jit_compile`, one `jax.jit` whose arguments include
    the backbone's variable values (read in a StatelessScope, not baked in as
    constants: a later weight update is seen without recompiling)."""
    if not jit_compile:
        return function
    variables = list(backbone.variables)

    @jax.jit
    def compiled(values, *arguments):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*arguments)

    def run(*arguments):
        return compiled([variable.value for variable in variables], *arguments)

    return run


# -- export (keras_ctx.export) -----------------------------------------------------------
# Keras' ExportArchive converts the forward pass with jax2tf (its own XLA module in
# the graph); the input checks, `parse_example` and the preprocessor stay TensorFlow
# ops around it.


def export_refusal(specs, generation):
    """The one-line reason JAX cannot export as asked, else None."""
    if generation is not None:
        return ("`generation` (serve_generate) is exported from TensorFlow only: save the "
                "weights, then export with KERAS_BACKEND=tensorflow.")
    if any(spec.shape.rank >= 2 and spec.shape[1] is None for spec in specs.values()):
        # jax2tf traces the length symbolically, and slicing a position table by it
        # compares symbolic sizes.
        return ("On JAX the served sequence length is fixed: pass sequence_length=N "
                "(--sequence-length N), or export with KERAS_BACKEND=tensorflow for a free one.")
    return None


def compiled_forward(forward, jit_compile):
    return forward  # jax2tf compiles it


def served_forward(archive, forward, specs):
    """The jax2tf conversion of `forward`, registered as the archive's `forward` endpoint
    (the signature of the cast inputs, without the serving checks)."""
    return archive.add_endpoint("forward", forward, input_signature=[specs])


def add_endpoint(archive, name, serve, input_signature):
    """`serve` (TensorFlow ops around `served_forward`'s forward) traced as a tf.function
    first, so that the archive keeps it, not jax2tf."""
    import tensorflow as tf

    serve = tf.function(serve, input_signature=input_signature, autograph=False)
    serve.get_concrete_function()
    return archive.add_endpoint(name, serve, input_signature=None)


def preprocessed(preprocessor, text):
    """serve_text's features: a Keras layer's `call` on the TensorFlow strings (as in
    tf.data). Its `__call__` would convert them to JAX arrays, which hold no text (keras_ctx's
    and keras-hub's preprocessing layers keep them strings; a user's layer does not). The
    layer is built: Keras' ExportArchive tracks built layers only."""
    if isinstance(preprocessor, keras.layers.Layer):
        return preprocessor.call(text)
    return preprocessor(text)


ONNX_CONVERTER = None  # Keras' JAX export writes ONNX through jax2onnx, not a pinned extra


def onnx_refusal(model, batch_size, sequence_length):
    return (f"ONNX export runs on Keras' TensorFlow backend (tf2onnx) or torch (Keras' "
            f"model.export), and {model.name!r} runs on jax: save its weights, then call "
            "export_onnx with KERAS_BACKEND=tensorflow (or torch); "
            "keras_ctx.export.export_saved_model also exports from JAX.")
