"""Cross-view training (Clark et al. 2018): semi-supervised sequence tagging.

Training alternates minibatches (Sec. 3):

- labelled (x, y) of task k: the primary module learns
      L_sup = CE(y, p_k(y | x))                      (mean over real tokens)
- unlabelled x: every auxiliary module j of every task learns to match the
  primary module's prediction on the full input,
      L_CVT = sum_k sum_j KL(p_k(y | x) || p_k^j(y | x))
  "holding the primary module's prediction fixed (we do not back-propagate
  through it)": the targets come from a pass without dropout, under
  stop_gradient; the auxiliary modules and the shared encoder learn, the
  primary module does not.

`CrossViewTrainer.train_step` takes one element of `cvt_dataset` (both
streams zipped) and makes the updates L_0, U, L_1, U, ..., L_(K-1), U in turn
(the multi-task variant alternates over its tasks' labelled data). Each update
is the Pretrainer base's step on that minibatch's losses, so it changes only
the weights its loss reaches (the primary module on labelled data, the
auxiliary modules on unlabelled data, the encoder on both), as the paper's
separate updates do.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_ctx.models.cvt import AUXILIARY_VIEWS, PredictionModule, auxiliary_views
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy, weighted_mean

UNLABELLED = "__unlabelled__"


def _kl(teacher_probabilities, student_logits):
    """Per-token KL(p || q) from probabilities p and logits q, float32."""
    p = ops.cast(teacher_probabilities, "float32")
    log_q = ops.log_softmax(ops.cast(student_logits, "float32"), axis=-1)
    log_p = ops.log(ops.maximum(p, 1e-20))
    return ops.sum(p * (log_p - log_q), axis=-1)


@keras.saving.register_keras_serializable(package="keras_ctx")
class CrossViewTrainer(Pretrainer):
    """CVT over a `CvtEncoder`: primary and auxiliary modules per task, alternating steps.

    Args:
        encoder: a `CvtEncoder` (outputs `sequence_output` = [h1; h2],
            `forward_states`, `backward_states`).
        tasks: {task name: number of labels}, or an int for one task "tags".
            Several tasks share the encoder (the multi-task variant).
        hidden_size: the prediction modules' ReLU layer (512).
        dropout: on the auxiliary modules' inputs (default: the encoder's).

    Data: `cvt_dataset(labelled, unlabelled)`. `call(inputs)` returns
    {task: primary logits}. Metrics: `loss`, `supervised_loss`, `cvt_loss`,
    `accuracy` (the primary module's token accuracy on labelled batches).

    Example:
    >>> trainer = CrossViewTrainer(CvtEncoder(vocabulary_size=20000), tasks={"ner": 9})
    >>> trainer.compile(keras.optimizers.SGD(0.5, momentum=0.9, clipnorm=1.0))
    >>> trainer.fit(cvt_dataset(labelled, unlabelled), steps_per_epoch=1000)

    References:
        Clark et al., "Semi-Supervised Sequence Modeling with Cross-View
        Training", 2018.
    """

    serialized_models = ("encoder",)

    def __init__(self, encoder, tasks, hidden_size=512, dropout=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(tasks, int):
            tasks = {"tags": tasks}
        if not tasks or not all(isinstance(n, int) and n > 0 for n in tasks.values()):
            raise ValueError(f"`tasks` must map task names to label counts > 0, got {tasks!r}.")
        if UNLABELLED in tasks:
            raise ValueError(f"{UNLABELLED!r} is reserved; rename that task.")
        if dropout is None:
            dropout = encoder.get_config().get("dropout", 0.0)
        self.encoder = encoder
        self.tasks = dict(tasks)
        self.task_names = list(tasks)
        self.hidden_size = hidden_size
        self.dropout = float(dropout)
        self.primary = [PredictionModule(n, hidden_size, name=f"{t}_primary")
                        for t, n in tasks.items()]
        self.auxiliary = [[PredictionModule(n, hidden_size, dropout=self.dropout,
                                            name=f"{t}_{view}") for view in AUXILIARY_VIEWS]
                          for t, n in tasks.items()]
        # Built here, so that Keras never has to trace `call` with a training batch.
        config = encoder.get_config()
        both_layers = 2 * (config["first_layer_size"] + config["second_layer_size"])
        for module in self.primary:
            module.build((None, None, both_layers))
        for modules in self.auxiliary:
            for module in modules:
                module.build((None, None, config["first_layer_size"]))
        self.supervised_loss = keras.metrics.Mean(name="supervised_loss")
        self.cvt_loss = keras.metrics.Mean(name="cvt_loss")
        self.accuracy = TokenAccuracy(name="accuracy")
        self.objective_metrics = [self.supervised_loss, self.cvt_loss, self.accuracy]
        self.built = True

    def call(self, inputs, training=False):
        features = self.encoder(inputs, training=training)
        outputs = {t: m(features["sequence_output"], training=training)
                   for t, m in zip(self.task_names, self.primary)}
        views = auxiliary_views(features["forward_states"], features["backward_states"])
        for t, modules in zip(self.task_names, self.auxiliary):
            for view, module in zip(AUXILIARY_VIEWS, modules):
                outputs[f"{t}_{view}"] = module(views[view], training=training)
        return outputs

    # --- losses ---------------------------------------------------------------------------

    def supervised_losses(self, inputs, labels, task, training):
        index = self.task_names.index(task)
        features = self.encoder(inputs, training=training)
        logits = self.primary[index](features["sequence_output"], training=training)
        weights = ops.cast(inputs["padding_mask"], "float32")
        loss = weighted_cross_entropy(labels, logits, weights)
        self.supervised_loss.update_state(loss)
        self.accuracy.update_state(labels, logits, sample_weight=weights)
        return {"supervised": loss}

    def cvt_losses(self, inputs):
        weights = ops.cast(inputs["padding_mask"], "float32")
        # Targets: the primary modules on the full input, without dropout, held fixed.
        teacher = self.encoder(inputs, training=False)["sequence_output"]
        targets = [ops.stop_gradient(ops.softmax(m(teacher, training=False), axis=-1))
                   for m in self.primary]
        student = self.encoder(inputs, training=True)
        views = auxiliary_views(student["forward_states"], student["backward_states"])
        total = 0.0
        for target, modules in zip(targets, self.auxiliary):
            for view, module in zip(AUXILIARY_VIEWS, modules):
                total += weighted_mean(_kl(target, module(views[view], training=True)),
                                       weights)
        self.cvt_loss.update_state(total)
        return {"cvt": total}

    def compute_losses(self, batch, training):
        if batch["branch"] == UNLABELLED:
            return self.cvt_losses(batch["inputs"])
        return self.supervised_losses(batch["inputs"], batch["labels"], batch["branch"],
                                      training)

    # --- the alternating step -------------------------------------------------------------

    def step_batches(self, batch):
        """L_0, U, L_1, U, ..., L_(K-1), U: 2K updates, each the base's whole update.

        Each update changes only the weights its loss reaches. Sequential
        updates, no control flow: they also run under MirroredStrategy, where
        a synchronising step inside a `tf.cond` cannot.
        """
        batches = []
        for task in self.task_names:
            inputs, labels = batch["labelled"][task]
            batches.append({"branch": task, "inputs": inputs, "labels": labels})
            batches.append({"branch": UNLABELLED, "inputs": batch["unlabelled"][task]})
        return batches

    def test_step(self, data):
        """Evaluates the primary module of the first task on `(inputs, labels)` batches."""
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)
        total = self.total_loss(self.supervised_losses(inputs, labels, self.task_names[0],
                                                       training=False))
        return self._results(total)

    def get_config(self):
        return dict(super().get_config(), tasks=self.tasks, hidden_size=self.hidden_size,
                    dropout=self.dropout)


def cvt_dataset(labelled, unlabelled, task_names=None):
    """The two streams of `CrossViewTrainer`, zipped: one element feeds one step.

    Args:
        labelled: a dataset of `(inputs, labels)` batches, or {task: such a
            dataset} for the multi-task variant.
        unlabelled: a dataset of `inputs` batches (the same input names and
            shapes). With K tasks, each step takes K of its batches.
        task_names: the trainer's task names when `labelled` is one dataset
            (default "tags", `CrossViewTrainer(tasks=int)`'s name).

    Returns:
        An endless dataset of {"labelled": {task: (inputs, labels)},
        "unlabelled": {task: inputs}}.
    """
    if not isinstance(labelled, dict):
        names = list(task_names or ["tags"])
        if len(names) != 1:
            raise ValueError(f"One labelled dataset but tasks {names}: pass {{task: dataset}}.")
        labelled = {names[0]: labelled}
    names = list(labelled)
    stream = unlabelled.repeat()
    return tf.data.Dataset.zip({
        "labelled": {t: labelled[t].repeat() for t in names},
        # Every K-th unlabelled batch for each task: no batch is used twice per pass.
        "unlabelled": {t: stream.shard(len(names), k) for k, t in enumerate(names)},
    })
