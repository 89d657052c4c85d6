"""Cross-view training (Clark et al. 2018): semi-supervised sequence tagging.

Training alternates minibatches (Sec. 3):

- labelled (x, y) of task k: the primary module learns
      L_sup = CE(smooth(y), p_k(y | x))           (mean over real tokens)
  with label smoothing 0.1 and the encoder's dropout at 0.5 (cvt_text);
- unlabelled x: every auxiliary module j of every task learns to match the
  primary module's prediction on the full input,
      L_CVT = sum_k sum_j KL(p_k(y | x) || p_k^j(y | x))
  "holding the primary module's prediction fixed (we do not back-propagate
  through it)": the targets come from a pass without dropout, under
  stop_gradient; the student pass drops 0.2 (cvt_text's unlabeled_keep_prob
  0.8); the auxiliary modules and the shared encoder learn, the primary
  module does not. The five modules are cvt_text's: full, forward, backward,
  future, past (keras_ctx.models.cvt). KL differs from cvt_text's
  cross-entropy against the soft targets by the targets' entropy, a constant:
  the same gradients.

`CrossViewTrainer.train_step` takes one element of `keras_ctx.data.cvt.cvt_dataset` (both
streams zipped) and makes two updates, L then U: a labelled minibatch of the task
the dataset drew for the step (with several tasks, task k with probability
proportional to sqrt(its labelled sentences), cvt_text's training/trainer.py), then
an unlabelled one. Each update is the Pretrainer base's step on that minibatch's
losses, so it changes only the weights its loss reaches (the primary module on
labelled data, the auxiliary modules on unlabelled data, the encoder on both), as
the paper's separate updates do; a drawn task's update computes every task's
branch (`keras.ops.switch`) and gives the other tasks' primary modules a zero
gradient, which `CvtSGD` does not apply: they and their momentum stay as they
are, as cvt_text's per-task train op (None gradients) leaves them.

Optimisation as released (`cvt_optimizer`): SGD with momentum 0.9 (`CvtSGD`), global
norm clipping 1.0, learning rate 0.5 * min(t, 5000) / 5000 / (1 + 0.005 sqrt(t))
(`CvtLearningRate`), and an exponential moving average of the weights (decay
0.998, of every weight at every update, as cvt_text's UPDATE_OPS) that replaces
them when `fit` ends, for evaluation (ema_test). Kept differences: Keras' velocity
holds lr * gradient (TF1's MomentumOptimizer multiplies the accumulated gradient
by the current lr: the same under a constant lr, a little apart in warm-up); a
reached weight whose whole gradient is exactly zero (a module whose ReLU units
are all off on a batch) keeps its momentum, which TF1 would apply; so does a
word row read with an exactly zero gradient (`CvtSGD` judges a row by its
gradient, TF1 by the ids read: rows the loss masks out, as padding's, have no
momentum to apply); the character table is updated whole, every row moving by its
momentum (TF1: the rows read; most rows read have a zero gradient there, through
the CNN's max-pooling, so a gradient cannot tell them); the global norm is the
summed gradient's (TF1 squares a lookup's slices position by position).
"""

import keras
from keras import ops

from keras_ctx.models.cvt import (
    AUXILIARY_VIEWS,
    PROJECTION_SIZE,
    PredictionModule,
    auxiliary_views,
    view_weights,
)
from keras_ctx.common import compat, validation
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.losses import TokenAccuracy, top_one_correct, weighted_mean
from keras_ctx.schedules import CVT_LEARNING_RATE as LEARNING_RATE
from keras_ctx.schedules import CVT_WARM_UP_STEPS as WARM_UP_STEPS
from keras_ctx.schedules import CvtLearningRate  # noqa: F401 (re-exported)

UNLABELLED = "__unlabelled__"
DRAWN = "__drawn__"  # a labelled minibatch of the task `cvt_dataset` drew for the step

# cvt_text configure.py (Clark et al. 2018).
LABEL_SMOOTHING = 0.1
LABELLED_DROPOUT = 0.5
UNLABELLED_DROPOUT = 0.2
MOMENTUM = 0.9
GRADIENT_CLIP = 1.0
EMA_DECAY = 0.998


def _kl(teacher_probabilities, student_logits):
    """Per-token KL(p || q) from probabilities p and logits q, float32."""
    p = ops.cast(teacher_probabilities, "float32")
    log_q = ops.log_softmax(ops.cast(student_logits, "float32"), axis=-1)
    log_p = ops.log(ops.maximum(p, 1e-20))
    return ops.sum(p * (log_p - log_q), axis=-1)


def smoothed_cross_entropy(labels, logits, smoothing):
    """Per-token CE against (1 - smoothing) onehot(y) + smoothing / n, float32."""
    log_q = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.expand_dims(ops.cast(labels, "int32"), -1)
    nll = -ops.squeeze(ops.take_along_axis(log_q, labels, axis=-1), -1)
    return (1.0 - smoothing) * nll - smoothing * ops.mean(log_q, axis=-1)


@keras.saving.register_keras_serializable(package="keras_ctx")
class CvtSGD(keras.optimizers.SGD):
    """Keras' momentum SGD, but a weight whose whole gradient is exactly zero keeps
    its value and its momentum, as one of cvt_text's per-task train ops leaves it.

    cvt_text (model/multitask_model.py, `_get_train_op`) builds one train op per
    task from `compute_gradients(loss)`: a weight the loss does not reach has a
    None gradient, and TF1's momentum optimizer leaves it and its slot alone. A
    drawn task's update here traces every task's branch (`keras.ops.switch`),
    so a compiled step (a TF graph, XLA, JAX) gives the other tasks' primary
    modules zeros, which Keras' SGD would apply: their velocity decays and
    still moves them. Same arguments as `keras.optimizers.SGD`.

    The same holds row by row for the lookup tables (`lookup_tables`: their paths,
    which `CrossViewTrainer.compile` sets: the word table): cvt_text reads its
    tables with `embedding_lookup`, whose gradient is sparse, and TF1's momentum
    updates only the rows a minibatch read; Keras' would move every row by its velocity.
    """

    lookup_tables = frozenset()

    def update_step(self, gradient, variable, learning_rate):
        if self.momentum == 0:  # no velocity: a zero gradient moves nothing
            return super().update_step(gradient, variable, learning_rate)
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        momentum = ops.cast(self.momentum, variable.dtype)
        index = compat.variable_index(self, variable)  # TensorFlow passes its tf.Variable
        m = self.momentums[index]
        kept = ops.convert_to_tensor(m)  # jnp.where takes no Keras variable
        path = compat.attribute(self, "optimizer_variables")[index].path
        if path in self.lookup_tables:  # a row is reached when the minibatch read it
            reached = ops.any(ops.not_equal(gradient, 0), axis=-1, keepdims=True)
        else:
            reached = ops.any(ops.not_equal(gradient, 0))
        # ops, not operators: on TensorFlow a lookup's gradient is an IndexedSlices.
        scaled = ops.multiply(gradient, learning_rate)
        velocity = ops.where(reached, ops.subtract(ops.multiply(kept, momentum), scaled), kept)
        self.assign(m, velocity)
        step = (ops.subtract(ops.multiply(velocity, momentum), scaled) if self.nesterov
                else velocity)
        self.assign_add(variable, ops.where(reached, step, 0.0))


def cvt_optimizer(learning_rate=LEARNING_RATE, warm_up_steps=WARM_UP_STEPS,
                  ema_decay=EMA_DECAY):
    """cvt_text's optimizer: momentum SGD (`CvtSGD`), global-norm clip 1.0,
    `CvtLearningRate`, EMA.

    With `ema_decay` (None: no average) Keras keeps the moving average of
    every weight (updated after each update) and writes it into the weights
    when `fit` ends: the model evaluated and saved is the average (ema_test).
    """
    ema = {} if ema_decay is None else dict(use_ema=True, ema_momentum=ema_decay)
    return CvtSGD(CvtLearningRate(learning_rate, warm_up_steps), momentum=MOMENTUM,
                  global_clipnorm=GRADIENT_CLIP, **ema)


@keras.saving.register_keras_serializable(package="keras_ctx")
class CrossViewTrainer(Pretrainer):
    """CVT over a `CvtEncoder`: primary and five auxiliary modules per task, alternating steps.

    Args:
        encoder: a `CvtEncoder` (`forward_pass(inputs, dropout, training)` with
            outputs `sequence_output` = [h1; h2], `forward_states`,
            `backward_states`).
        tasks: {task name: number of labels}, or an int for one task "tags".
            Several tasks share the encoder (the multi-task variant).
        hidden_size: the prediction modules' hidden layer (512).
        labelled_dropout: the encoder's dropout on labelled batches (default:
            the encoder's `dropout`, 0.5).
        unlabelled_dropout: on the student pass of unlabelled batches (0.2).
        label_smoothing: on the labelled targets only (0.1).
        sentence_boundaries: the inputs wrap each sentence in `<start>` ...
            `<end>` (cvt_text's Example; `WordVocabulary(sentence_boundaries=True)`
            and `keras_ctx.tasks.cvt_tagger.tagging_inputs` make them): the
            encoder reads them, every output and loss leaves them out, so labels
            and predictions stay aligned to the words (inputs n + 2 wide, labels
            n). False (the default, and trainers saved before): inputs of words.

    Data: `cvt_dataset(labelled, unlabelled)`. `call(inputs)` returns
    {task: primary logits, "<task>_<view>": auxiliary logits}. Metrics: `loss`,
    `supervised_loss`, `cvt_loss`, `accuracy` (the primary module's token
    accuracy on labelled batches).

    Example:
    >>> trainer = CrossViewTrainer(CvtEncoder(vocabulary_size=20000), tasks={"ner": 9})
    >>> trainer.compile(cvt_optimizer())
    >>> trainer.fit(cvt_dataset(labelled, unlabelled), steps_per_epoch=1000)

    References:
        Clark et al., "Semi-Supervised Sequence Modeling with Cross-View
        Training", 2018.
    """

    serialized_models = ("encoder",)

    def __init__(self, encoder, tasks, hidden_size=PROJECTION_SIZE, labelled_dropout=None,
                 unlabelled_dropout=UNLABELLED_DROPOUT, label_smoothing=LABEL_SMOOTHING,
                 sentence_boundaries=False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(tasks, int):
            tasks = {"tags": tasks}
        if not isinstance(tasks, dict) or not tasks:
            validation.refuse("tasks", "a label count or a non-empty mapping of task names "
                              "to label counts", tasks)
        if UNLABELLED in tasks:
            validation.refuse("tasks", f"without a task named {UNLABELLED!r} (the unlabelled "
                              "batches' branch): rename that task", tasks)
        for name, count in tasks.items():
            validation.positive_int(f"tasks[{name!r}]", count)
        if labelled_dropout is None:
            labelled_dropout = encoder.get_config().get("dropout", LABELLED_DROPOUT)
        for name, rate in (("labelled_dropout", labelled_dropout),
                           ("unlabelled_dropout", unlabelled_dropout),
                           ("label_smoothing", label_smoothing)):
            validation.rate(name, rate)
        self.encoder = encoder
        self.tasks = dict(tasks)
        self.task_names = list(tasks)
        self.hidden_size = hidden_size
        self.labelled_dropout = float(labelled_dropout)
        self.unlabelled_dropout = float(unlabelled_dropout)
        self.label_smoothing = float(label_smoothing)
        self.sentence_boundaries = bool(sentence_boundaries)
        self.primary = [PredictionModule(n, hidden_size, name=f"{t}_primary")
                        for t, n in tasks.items()]
        self.auxiliary = [[PredictionModule(n, hidden_size, activate=view != "full",
                                            name=f"{t}_{view}") for view in AUXILIARY_VIEWS]
                          for t, n in tasks.items()]
        # Built here, so that Keras never has to trace `call` with a training batch.
        first, both_layers = encoder.output_sizes
        for module in self.primary:
            module.build((None, None, both_layers))
        for modules in self.auxiliary:
            for view, module in zip(AUXILIARY_VIEWS, modules):
                module.build((None, None, both_layers if view == "full" else first))
        self.supervised_loss = keras.metrics.Mean(name="supervised_loss")
        self.cvt_loss = keras.metrics.Mean(name="cvt_loss")
        self.accuracy = TokenAccuracy(name="accuracy")
        self.objective_metrics = [self.supervised_loss, self.cvt_loss, self.accuracy]
        self.built = True

    def encode_words(self, inputs, dropout=None, training=None):
        """(the primary module's input, the auxiliary views, the words' padding mask).

        With `sentence_boundaries` the encoder reads `<start>` and `<end>` and
        everything returned is cut to the words' positions (cvt_text's mask is 0
        on them): the future view of the first word is the forward state of
        `<start>`, the past view of the last the backward state of `<end>`.
        """
        features = self.encoder.forward_pass(inputs, dropout, training=training)
        primary, views = features["sequence_output"], auxiliary_views(features)
        mask = inputs["padding_mask"]
        if self.sentence_boundaries:
            # Row <start> w_1 .. w_n <end>: the words are 1..n; real from 2 on is n wide.
            primary = primary[:, 1:-1]
            views = {view: x[:, 1:-1] for view, x in views.items()}
            mask = mask[:, 2:]
        return primary, views, mask

    def call(self, inputs, training=False):
        primary, views, _ = self.encode_words(inputs, self.labelled_dropout, training)
        outputs = {t: m(primary) for t, m in zip(self.task_names, self.primary)}
        for t, modules in zip(self.task_names, self.auxiliary):
            for view, module in zip(AUXILIARY_VIEWS, modules):
                outputs[f"{t}_{view}"] = module(views[view])
        return outputs

    def compile(self, optimizer="rmsprop", *args, **kwargs):
        super().compile(optimizer, *args, **kwargs)
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)  # mixed_float16
        if isinstance(inner, CvtSGD):
            inner.lookup_tables = frozenset(w.path for w in self.lookup_tables())

    def lookup_tables(self):
        """The encoder's word table: `CvtSGD` updates a row only when the minibatch read
        it, as TF1 applies `embedding_lookup`'s gradient (a read word's row always has
        a gradient). The character table stays whole: its max-pooling gives most rows
        read a zero gradient, which TF1 would still apply momentum to."""
        return [self.encoder.get_layer("token_embedding").embeddings]

    def primary_logits(self, inputs, task=None):
        """The primary module's logits of `task` (default: the first), no dropout; one
        row per word."""
        index = self.task_names.index(task or self.task_names[0])
        return self.primary[index](self.encode_words(inputs, training=False)[0])

    # --- losses ---------------------------------------------------------------------------

    def _check_label_width(self, inputs, labels):
        words, width = labels.shape[1], inputs["padding_mask"].shape[1]
        wanted = None if words is None else words + (2 if self.sentence_boundaries else 0)
        if width is not None and wanted is not None and width != wanted:
            raise ValueError(f"Labels of {words} words need inputs {wanted} wide with "
                             f"sentence_boundaries={self.sentence_boundaries}, got {width}: "
                             "make them with keras_ctx.tasks.cvt_tagger.tagging_inputs.")

    def _task_tokens(self, index, training):
        """primary, labels -> (per-token smoothed CE, per-token top-1 correct) of one task."""
        # cvt_text smooths the labelled targets in training only.
        smoothing = self.label_smoothing if training else 0.0
        count = self.tasks[self.task_names[index]]

        def tokens(primary, labels):
            logits = self.primary[index](primary)
            # Another task's batch may hold larger labels: `switch` traces every branch.
            labels = ops.minimum(ops.cast(labels, "int32"), count - 1)
            return (smoothed_cross_entropy(labels, logits, smoothing),
                    top_one_correct(labels, logits))
        return tokens

    def supervised_losses(self, inputs, labels, task, training):
        """L_sup of `task`'s primary module; `task` a name, or an int32 tensor indexing
        `task_names` (a drawn task: one branch per task, `keras.ops.switch`)."""
        self._check_label_width(inputs, labels)
        primary, _, mask = self.encode_words(inputs, self.labelled_dropout, training)
        weights = ops.cast(mask, "float32")
        if isinstance(task, str):
            per_token, correct = self._task_tokens(self.task_names.index(task), training)(
                primary, labels)
        else:
            per_token, correct = ops.switch(
                task, [self._task_tokens(i, training) for i in range(len(self.tasks))],
                primary, labels)
        loss = weighted_mean(per_token, weights)
        self.supervised_loss.update_state(loss)
        keras.metrics.Mean.update_state(self.accuracy, correct, sample_weight=weights)
        return {"supervised": loss}

    def cvt_losses(self, inputs):
        # Targets: the primary modules on the full input, without dropout, held fixed.
        teacher = self.encode_words(inputs, training=False)[0]
        targets = [ops.stop_gradient(ops.softmax(ops.cast(m(teacher), "float32"), axis=-1))
                   for m in self.primary]
        _, views, mask = self.encode_words(inputs, self.unlabelled_dropout, training=True)
        weights = view_weights(mask)
        total = 0.0
        for target, modules in zip(targets, self.auxiliary):
            for view, module in zip(AUXILIARY_VIEWS, modules):
                total += weighted_mean(_kl(target, module(views[view])), weights[view])
        self.cvt_loss.update_state(total)
        return {"cvt": total}

    def compute_losses(self, batch, training):
        if batch["branch"] == UNLABELLED:
            return self.cvt_losses(batch["inputs"])
        # A drawn task: the same index on every row (a replica's share holds it too).
        task = batch["task"][0] if batch["branch"] == DRAWN else batch["branch"]
        return self.supervised_losses(batch["inputs"], batch["labels"], task, training)

    # --- the alternating step -------------------------------------------------------------

    def step_batches(self, batch):
        """L, U: a labelled minibatch, then an unlabelled one, each the base's whole update.

        The labelled one is of the task `cvt_dataset` drew for this step (an
        element with "task"), as cvt_text's trainer draws one per step; an element
        with every task's batch (`{"labelled": {task: ...}, "unlabelled": {task:
        ...}}`, as `cvt_dataset` makes for one task) makes L_0, U, ..., L_(K-1), U.
        Sequential updates, no control flow around them: they also run under
        MirroredStrategy, where a synchronising step inside a `tf.cond` cannot.
        """
        if "branch" in batch:  # one minibatch already named (e.g. labelled-only training)
            return (batch,)
        if "task" in batch:
            inputs, labels = batch["labelled"]
            return ({"branch": DRAWN, "task": batch["task"], "inputs": inputs,
                     "labels": labels}, {"branch": UNLABELLED, "inputs": batch["unlabelled"]})
        batches = []
        for task in self.task_names:
            inputs, labels = batch["labelled"][task]
            batches.append({"branch": task, "inputs": inputs, "labels": labels})
            batches.append({"branch": UNLABELLED, "inputs": batch["unlabelled"][task]})
        return batches

    def unread_weights(self, batch):
        """A labelled minibatch reads the encoder and its task's primary module (a drawn
        task's: every primary module, the others' gradients zero); an unlabelled one
        the encoder and the auxiliary modules (the primary modules' predictions are
        fixed targets)."""
        if batch["branch"] == UNLABELLED:
            unread = self.primary
        elif batch["branch"] == DRAWN:
            unread = []
        else:
            index = self.task_names.index(batch["branch"])
            unread = [m for i, m in enumerate(self.primary) if i != index]
        if batch["branch"] != UNLABELLED:
            unread += [m for modules in self.auxiliary for m in modules]
        return [w for module in unread for w in module.weights]

    def evaluation_losses(self, batch):
        """The primary module of the first task on `(inputs, labels)` batches."""
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(batch)
        return self.supervised_losses(inputs, labels, self.task_names[0], training=False)

    def get_config(self):
        return dict(super().get_config(), tasks=self.tasks, hidden_size=self.hidden_size,
                    labelled_dropout=self.labelled_dropout,
                    unlabelled_dropout=self.unlabelled_dropout,
                    label_smoothing=self.label_smoothing,
                    sentence_boundaries=self.sentence_boundaries)
