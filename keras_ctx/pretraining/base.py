"""The Pretrainer contract: one train/test step for every objective, on every backend.

An objective subclasses `Pretrainer` and says only what its losses are:

    compute_losses(batch, training) -> {name: float32 scalar}   (and updates its metrics)

The base owns the step, the same way Keras' own `train_step` does it:

    total  = total_loss(losses)                  (a sum unless the objective weighs them)
    scaled = optimizer.scale_loss(total / num_replicas())
    grads  = d scaled / d step_variables(batch)  (the weights this minibatch's loss reads,
                                                  decided when the objective is built; a
                                                  lookup's repeated rows summed, see
                                                  layers/lookup.py)
    optimizer.apply(grads)                       (a LossScaleOptimizer unscales here)

Dividing by the replicas matters because MirroredStrategy sums the replicas'
gradients (without it, N replicas take N-times steps); `scale_loss` matters
under mixed_float16, where Keras wraps the optimizer in a LossScaleOptimizer
whose `apply` divides the gradients by the scale (without it, float16
gradients underflow and then shrink 2^15-fold: no learning). Losses that are
weighted means over tokens normalise by the global batch's weight total
(`keras_ctx.pretraining.losses.weighted_mean`), so that N replicas give
exactly the one-device gradient.

Each backend runs this step its own way (keras_ctx.backend): TensorFlow
with a GradientTape per tf.distribute replica, JAX as a stateless
`train_step(state, data)` over the global batch (data parallel through
`keras.distribution.DataParallel`), PyTorch with autograd on one device.
Objectives write keras.ops only.

Hooks for objectives that need them: `unread_weights` (weights a minibatch's
loss does not read: RoBERTa's pooler, the CVT modules of other branches),
`step_variables` (ELECTRA's two-stage schedule trains subsets), `total_loss`
(ELECTRA's lambda), `step_batches` (CVT's alternating minibatches), `evaluation_losses` (what `evaluate`
measures), and `serialized_models` (the sub-models (de)serialised by
get_config/from_config). State carried between steps (XLNet's memory,
AWD-LSTM's states) lives in non-trainable variables that `compute_losses`
reads and assigns (this replica's rows: `backend.replica_rows`); on JAX the
assignments travel through the step's state.
"""

import keras
from keras import ops

from keras_ctx import backend
from keras_ctx.common.keras_files import CheckedWeightFiles
from keras_ctx.models.checked_input import CheckedTokenIds
from keras_ctx.models.backbone import ReadsBackboneOutputs
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy


def num_replicas():
    """Replicas whose gradients the optimizer sums (1 outside tf.distribute, on JAX and on torch)."""
    return backend.num_replicas()


class Pretrainer(backend.PretrainerStep, ReadsBackboneOutputs, CheckedTokenIds,
                 CheckedWeightFiles, keras.Model):
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

    # --- what an objective says --------------------------------------------------------

    def compute_losses(self, batch, training):
        """{name: float32 scalar loss} of this replica's batch; updates the objective's metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute_losses.")

    def total_loss(self, losses):
        """The loss the step minimises, from `compute_losses`' dict (their sum by default)."""
        return sum(ops.cast(loss, "float32") for loss in losses.values())

    def step_variables(self, batch):
        """The variables this minibatch's update trains: the trainable ones but
        `unread_weights(batch)`."""
        unread = {id(w) for w in self.unread_weights(batch)}
        return [v for v in self.trainable_variables if id(v) not in unread]

    def unread_weights(self, batch):
        """The weights the loss of `batch` (one of `step_batches`) does not read: the
        backbone's that no output declared by `reads_outputs` reads (none unless
        declared; CVT names its modules per minibatch). Declared, not found per step: they must get no update on any
        backend (TensorFlow's and PyTorch's gradients of them are None, JAX's would
        be zeros, which Adam's moments and weight decay would still apply);
        tests/pretraining/test_unread_weights.py holds each objective to TensorFlow's."""
        return self.backbone_weights_unread()

    def evaluation_losses(self, batch):
        """The losses `evaluate` reports: `compute_losses(batch, training=False)` by default."""
        return self.compute_losses(batch, training=False)

    # --- the step ------------------------------------------------------------------------

    @staticmethod
    def unpack_batch(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        return x if y is None and sample_weight is None else (x, y, sample_weight)

    def step_batches(self, batch):
        """The minibatches one `train_step` updates on, in order: `batch` alone by default.

        CVT alternates labelled and unlabelled minibatches inside one step;
        each gets the whole update (the backend's step, keras_ctx.backend).
        """
        return (batch,)

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
