"""The Pretrainer contract: one train/test step for every objective.

An objective subclasses `Pretrainer` and says only what its losses are:

    compute_losses(batch, training) -> {name: float32 scalar}   (and updates its metrics)

The base owns the step, the same way Keras' own `train_step` does it:

    total  = total_loss(losses)                  (a sum unless the objective weighs them)
    scaled = optimizer.scale_loss(total / num_replicas_in_sync)
    grads  = d scaled / d step_variables()       (None gradients dropped; a lookup's
                                                  repeated rows summed, see layers/lookup.py)
    optimizer.apply(grads)                       (a LossScaleOptimizer unscales here)

Dividing by the replicas matters because MirroredStrategy sums the replicas'
gradients (without it, N replicas take N-times steps); `scale_loss` matters
under mixed_float16, where Keras wraps the optimizer in a LossScaleOptimizer
whose `apply` divides the gradients by the scale (without it, float16
gradients underflow and then shrink 2^15-fold: no learning). Losses that are
weighted means over tokens normalise by the global batch's weight total
(`keras_ctx.pretraining.losses.weighted_mean`), so that N replicas give
exactly the one-device gradient.

Hooks for objectives that need them: `step_variables` (ELECTRA's two-stage
schedule trains subsets), `total_loss` (ELECTRA's lambda), `step_batches`
(CVT's alternating minibatches), and
`serialized_models` (the sub-models (de)serialised by get_config/from_config).
State carried between steps (XLNet's memory) is read and assigned in
`compute_losses`, per replica.
"""

import keras
from keras_ctx.optional import tensorflow as tf
from keras import ops

from keras_ctx import compat
from keras_ctx.layers.embeddings import checked_token_ids
from keras_ctx.layers.lookup import summed_rows
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy
from keras_ctx.training import check_xla


def num_replicas():
    """Replicas whose gradients the optimizer sums (1 outside tf.distribute)."""
    return tf.distribute.get_strategy().num_replicas_in_sync


class Pretrainer(keras.Model):
    """Base of every pretraining objective: the step, the `loss` metric, serialisation.

    Subclasses implement `compute_losses(batch, training)` and list their own
    metrics in `objective_metrics` (the `loss` metric, the total, is the
    base's). `batch` is the dataset element without Keras' tuple wrapping:
    the dict itself, or `(x, y, sample_weight)` when the element has labels
    or weights (unpack it with `keras.utils.unpack_x_y_sample_weight`).

    Example:
    >>> class MyObjective(Pretrainer):
    ...     def __init__(self, backbone, **kwargs):
    ...         super().__init__(**kwargs)
    ...         self.backbone = backbone
    ...     def compute_losses(self, batch, training):
    ...         ...
    ...         return {"lm": weighted_cross_entropy(labels, logits, weights)}
    """

    serialized_models = ("backbone",)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.objective_metrics = []

    @property
    def metrics(self):
        return [self.loss_tracker, *self.objective_metrics]

    def compile(self, *args, **kwargs):
        # A clear error instead of TensorFlow's, where XLA cannot run under the strategy.
        check_xla(self.distribute_strategy, kwargs.get("jit_compile", "auto"))
        super().compile(*args, **kwargs)

    def _checked(self, x):
        # A compiled step's asserts are gone and its gathers clamp: an id past
        # the vocabulary would train on the last row silently. Check the
        # dataset's ids where they enter, outside the compiled step.
        return checked_token_ids(x, self) if self.jit_compile else x

    def fit(self, x=None, *args, **kwargs):
        return super().fit(self._checked(x), *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return super().evaluate(self._checked(x), *args, **kwargs)

    # --- what an objective says --------------------------------------------------------

    def compute_losses(self, batch, training):
        """{name: float32 scalar loss} of this replica's batch; updates the objective's metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute_losses.")

    def total_loss(self, losses):
        """The loss the step minimises, from `compute_losses`' dict (their sum by default)."""
        return sum(ops.cast(loss, "float32") for loss in losses.values())

    def step_variables(self):
        """The variables this step trains (all trainable ones by default)."""
        return self.trainable_variables

    # --- the step ------------------------------------------------------------------------

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras builds the model from one batch it reads, which starts a pass
        # over the data: a generator's next epoch (other NSP pairs, other
        # masks) would then train, and a mirrored run would see other data
        # than one device. Only shapes and dtypes matter: a tf.data input
        # builds from its spec (other adapters would copy their arrays again).
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
        # Keras' private hook (keras_ctx.compat names it and the version it was
        # written for; resolving it here fails loudly if an upgrade removed it).
        compat.resolve("maybe_symbolic_build")
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    @staticmethod
    def unpack_batch(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        return x if y is None and sample_weight is None else (x, y, sample_weight)

    def step_batches(self, batch):
        """The minibatches one `train_step` updates on, in order: `batch` alone by default.

        CVT alternates labelled and unlabelled minibatches inside one step;
        each gets the whole update below.
        """
        return (batch,)

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
        variables = self.step_variables()
        if not self.optimizer.built:
            # Every trainable variable, as Keras builds it under a strategy: updates
            # of subsets (ELECTRA's stages, CVT, an unused pooler) share one
            # optimizer, and a checkpoint restores into the same variables.
            self.optimizer.build(self.trainable_variables)
        # A lookup's gradient repeats a row once per read; Keras' Adam squares each
        # repeat apart (keras_ctx/layers/lookup.py): sum them, whatever layer read the table.
        gradients = [summed_rows(g) for g in tape.gradient(scaled, variables)]
        # Weights the step does not reach (e.g. RoBERTa's unused pooler) have none.
        used = [(g, v) for g, v in zip(gradients, variables) if g is not None]
        self.optimizer.apply([g for g, _ in used], [v for _, v in used])
        return self._results(total)

    def test_step(self, data):
        total = self.total_loss(self.compute_losses(self.unpack_batch(data), training=False))
        return self._results(total)

    def _results(self, total):
        self.loss_tracker.update_state(total)
        results = {m.name: m.result() for m in self.metrics}
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 merges the workers' logs with strategy.reduce("MEAN", axis=0),
            # which fails on scalars: give each value the batch axis it expects.
            results = {name: value[None] for name, value in results.items()}
        return results

    # --- serialisation -------------------------------------------------------------------

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key in self.serialized_models:
            config[key] = keras.saving.serialize_keras_object(getattr(self, key))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in cls.serialized_models:
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


class HeadsPretrainer(Pretrainer):
    """Objectives made of heads over token positions: a weighted cross-entropy per head.

    Subclasses list `objectives` (names), return `{name: logits}` from `call`
    and `{name: (labels, weights or None)}` from `targets(batch)`. Metrics:
    `loss`, then `<name>_loss` and `<name>_accuracy` per objective.
    """

    objectives = ()

    def make_objective_metrics(self):
        """Call at the end of __init__, once `objectives` is known."""
        self.head_metrics = {name: (keras.metrics.Mean(name=f"{name}_loss"),
                                    TokenAccuracy(name=f"{name}_accuracy"))
                             for name in self.objectives}
        self.objective_metrics = [m for pair in self.head_metrics.values() for m in pair]

    def targets(self, batch):
        raise NotImplementedError(f"{type(self).__name__} must implement targets.")

    def compute_losses(self, batch, training):
        outputs, targets = self(batch, training=training), self.targets(batch)
        losses = {}
        for name, (loss_metric, accuracy) in self.head_metrics.items():
            labels, weights = targets[name]
            losses[name] = weighted_cross_entropy(labels, outputs[name], weights)
            loss_metric.update_state(losses[name])
            accuracy.update_state(labels, ops.cast(outputs[name], "float32"),
                                  sample_weight=weights)
        return losses


class TokenLikelihoodPretrainer(Pretrainer):
    """Maximum likelihood of target tokens given a backbone: metrics `loss` and `accuracy`.

    Subclasses implement `predictions(batch, training) -> (logits, labels,
    weights)`; the loss is the weighted mean cross-entropy of the labels.
    """

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.accuracy = TokenAccuracy(name="accuracy")
        self.objective_metrics = [self.accuracy]

    def predictions(self, batch, training):
        raise NotImplementedError(f"{type(self).__name__} must implement predictions.")

    def compute_losses(self, batch, training):
        logits, labels, weights = self.predictions(batch, training)
        self.accuracy.update_state(labels, logits, sample_weight=weights)
        return {"likelihood": weighted_cross_entropy(labels, logits, weights)}
