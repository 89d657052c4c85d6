"""Fine-tuning models over any backbone: classification, tagging, span QA.

Each task is a functional keras.Model taking the backbone's own inputs and
returning logits; `serving_outputs` names what an exported SavedModel returns
(logits and probabilities).
"""

import keras
import numpy as np
from keras import ops

from keras_ctx import registry
from keras_ctx.common import validation
from keras_ctx.common.keras_files import CheckedWeightFiles
from keras_ctx.models.checked_input import CheckedTokenIds
from keras_ctx.layers.dropout import Dropout
from keras_ctx.models.backbone import ReadsBackboneOutputs, without_absent_optional_inputs
from keras_ctx import backend

POOLINGS = ("auto", "pooled", "first", "last", "mean", "concat")


def padding_mask_of(inputs, like, name="padding_mask"):
    """The mask `name` among the inputs, or one from them, or all ones like `like[:, :, 0]`."""
    if isinstance(inputs, dict) and name in inputs:
        return inputs[name]
    if isinstance(inputs, dict) and "character_ids" in inputs:
        # Character inputs (ELMo): a padded word is a row of zero character ids.
        return ops.cast(ops.any(ops.not_equal(inputs["character_ids"], 0), axis=-1), "int32")
    # ones_like, not ones(shape): symbolic inputs have no static batch/time size.
    return ops.ones_like(like[:, :, 0], "int32")


@keras.saving.register_keras_serializable(package="keras_ctx")
class Pool(keras.layers.Layer):
    """Sequence -> vector: first token, last real token, or masked mean."""

    def __init__(self, mode, **kwargs):
        super().__init__(**kwargs)
        self.mode = mode

    def call(self, sequence, padding_mask):
        mask = ops.cast(padding_mask, sequence.dtype)
        if self.mode == "first":
            return sequence[:, 0]
        if self.mode == "last":
            # The last real token (GPT, XLNet classify from the end).
            last = ops.cast(ops.sum(ops.cast(padding_mask, "int32"), axis=1) - 1, "int32")
            last = ops.maximum(last, 0)
            return ops.take_along_axis(sequence, last[:, None, None], axis=1)[:, 0]
        total = ops.sum(sequence * mask[:, :, None], axis=1)
        return total / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)

    def compute_output_shape(self, sequence_shape, padding_mask_shape=None):
        return (sequence_shape[0], sequence_shape[-1])

    def get_config(self):
        return dict(super().get_config(), mode=self.mode)


# ULMFiT's concat pooling (Howard & Ruder 2018, Sec. 3.3).
FLOAT32_MIN = float(np.finfo(np.float32).min)

@keras.saving.register_keras_serializable(package="keras_ctx")
class ConcatPooling(keras.layers.Layer):
    """ULMFiT's concat pooling: h_c = [h_T; maxpool(H); meanpool(H)] (Sec. 3.3).

    Over the real tokens only: h_T is the last real token's state (right
    padding), the max and the mean skip padding.

    Call arguments:
        sequence: (batch, time, hidden).
        padding_mask: (batch, time), 1 for real tokens.

    Returns:
        (batch, 3 * hidden).

    Example:
    >>> pooled = ConcatPooling()(sequence, padding_mask)

    References:
        Howard & Ruder, "Universal Language Model Fine-tuning for Text
        Classification", 2018.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # it reads padding_mask; the time axis is gone

    def compute_mask(self, sequence, padding_mask=None, mask=None):
        return None

    def call(self, sequence, padding_mask):
        real = ops.cast(padding_mask, "bool")
        counts = ops.sum(ops.cast(real, "int32"), axis=1)
        last = ops.maximum(counts - 1, 0)
        h_last = ops.take_along_axis(sequence, last[:, None, None], axis=1)[:, 0]
        x = ops.cast(sequence, "float32")
        h_max = ops.max(ops.where(real[:, :, None], x, FLOAT32_MIN), axis=1)
        h_mean = ops.sum(ops.where(real[:, :, None], x, 0.0), axis=1) / ops.maximum(
            ops.cast(counts, "float32")[:, None], 1.0)
        pooled = [h_last, ops.cast(h_max, sequence.dtype), ops.cast(h_mean, sequence.dtype)]
        return ops.concatenate(pooled, axis=-1)

    def compute_output_shape(self, sequence_shape, padding_mask_shape=None):
        return (sequence_shape[0], 3 * sequence_shape[-1])


@keras.saving.register_keras_serializable(package="keras_ctx")
class MaskPadding(keras.layers.Layer):
    """Sets per-token logits at padding positions to a large negative value."""

    def call(self, logits, padding_mask):
        return ops.where(ops.cast(padding_mask, "bool")[:, :, None], logits, -1e9)

    def compute_output_shape(self, logits_shape, padding_mask_shape=None):
        return logits_shape


class Task(backend.TaskStep, ReadsBackboneOutputs, CheckedTokenIds, CheckedWeightFiles,
           keras.Model):
    """Base of the task models: keeps the backbone and (de)serialises it.

    A task that reads some of the backbone's outputs names them (`reads_outputs`);
    the weights that feed only the others (BERT's pooler under a token classifier)
    get no update on any backend (`unread_weights`: JAX's gradient of them is zeros,
    which weight decay would still apply; TensorFlow's and PyTorch's is None).
    """

    def unread_weights(self):
        """The backbone weights the task's loss does not read (none unless declared)."""
        return self.backbone_weights_unread()

    def call(self, inputs, training=None, mask=None):
        return super().call(without_absent_optional_inputs(self, inputs), training=training,
                            mask=mask)

    def _backbone_features(self, backbone):
        if not isinstance(backbone.input, dict):
            raise ValueError(
                "A task needs a backbone with named (dict) inputs, e.g. token_ids "
                f"and padding_mask; {backbone.name!r} takes {backbone.input}."
            )
        inputs = {name: keras.Input(t.shape[1:], dtype=t.dtype, name=name)
                  for name, t in backbone.input.items()}
        return inputs, backbone(inputs)

    def get_config(self):
        return dict(self._config, backbone=keras.saving.serialize_keras_object(self.backbone),
                    name=self.name)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)

    def serving_outputs(self, logits):
        return {"logits": logits, "probabilities": ops.softmax(logits, axis=-1)}


@keras.saving.register_keras_serializable(package="keras_ctx")
class SequenceClassifier(Task):
    """Classifies whole sequences (GLUE-style; GPT's and XLNet's from the last token).

    Args:
        backbone: any keras_ctx backbone (or a functional model with dict inputs
            and a `sequence_output` output).
        num_classes: number of labels.
        pooling: "pooled" (the backbone's pooled_output, BERT), "first",
            "last" (last real token, GPT/XLNet), "mean", "concat" (ULMFiT's
            [h_T; maxpool(H); meanpool(H)], AWD-LSTM's), or "auto": what the
            backbone's family says in `keras_ctx.families` (GPT and XLNet the
            last real token, T5 the mean of its encoder output, BART the
            decoder state at the final </s> through a dense + tanh layer); a
            backbone of no registered family: pooled when it has a
            pooled_output, else first.
        dropout: before the classifier (0.1 in BERT's fine-tuning), and
            before the transform when there is one.
        transform_activation: None (the logits read the pooled vector), or
            the activation of a dense layer of the vector's width in between:
            "tanh" is BART's classification head (dropout, dense, tanh,
            dropout, out_proj; Lewis et al. 2020, as fairseq and HF
            BartClassificationHead). With pooling="auto", the family's.
        output: the backbone output to pool (default: the family's, else
            "sequence_output").
        mask: the input that marks real tokens for "last" and "mean".

    Example:
    >>> classifier = keras_ctx.tasks.SequenceClassifier(backbone, num_classes=2)
    >>> classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    """

    def __init__(self, backbone, num_classes, pooling="auto", dropout=0.1, output=None,
                 mask=None, transform_activation=None, **kwargs):
        validation.one_of("pooling", pooling, POOLINGS)
        num_classes = validation.positive_int("num_classes", num_classes)
        dropout = validation.rate("dropout", dropout)
        inputs, features = self._backbone_features(backbone)
        if pooling == "auto":
            pooling, output, mask, family_transform = self._family_pooling(
                backbone, features, output, mask)
            transform_activation = transform_activation or family_transform
        output = output or "sequence_output"
        mask = mask or "padding_mask"
        if pooling == "pooled":
            if "pooled_output" not in features:
                raise ValueError(f"{backbone.name!r} has no pooled_output; use "
                                 "pooling='first', 'last' or 'mean'.")
            vector = features["pooled_output"]
        else:
            if output not in features:
                raise ValueError(f"{backbone.name!r} has no output {output!r}; it has "
                                 f"{sorted(features)}.")
            sequence = features[output]
            padding = padding_mask_of(inputs, sequence, mask)
            pool = ConcatPooling if pooling == "concat" else lambda **k: Pool(pooling, **k)
            vector = pool(name="pool")(sequence, padding)
        vector = Dropout(dropout, name="dropout")(vector)
        if transform_activation is not None:
            vector = keras.layers.Dense(vector.shape[-1], activation=transform_activation,
                                        name="transform")(vector)
            vector = Dropout(dropout, name="transform_dropout")(vector)
        logits = keras.layers.Dense(num_classes, name="logits", dtype="float32")(vector)
        super().__init__(inputs, logits, **kwargs)
        self.backbone = backbone
        self.reads_outputs("pooled_output" if pooling == "pooled" else output)
        self._config = {"num_classes": num_classes, "pooling": pooling, "dropout": dropout,
                        "output": output, "mask": mask,
                        "transform_activation": transform_activation}

    # Every door that takes labels checks them (a score like 0.5 was truncated to class 0
    # by sparse cross-entropy without a word).

    def fit(self, x=None, y=None, *args, **kwargs):
        return super().fit(x, checked_class_ids(self, y), *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        return super().evaluate(x, checked_class_ids(self, y), *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        return super().train_on_batch(x, checked_class_ids(self, y), *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        return super().test_on_batch(x, checked_class_ids(self, y), *args, **kwargs)

    @staticmethod
    def _family_pooling(backbone, features, output, mask):
        family = registry.of_backbone(backbone)
        if family is None:
            return ("pooled" if "pooled_output" in features else "first"), output, mask, None
        family_output, family_mask, mode, *transform = family.pooling
        return mode, output or family_output, mask or family_mask, (transform or [None])[0]


def check_class_ids(y, num_classes):
    """Refuses labels a classifier of `num_classes` cannot train on, naming the first row:
    numbers with a fraction (regression targets: sparse cross-entropy would truncate 0.5
    to class 0), non-finite ones, and ids outside [0, num_classes)."""
    labels = np.asarray(y)
    if labels.dtype.kind not in "iufb":
        raise ValueError(f"y holds {labels.dtype} labels: give class ids 0..{num_classes - 1}"
                         " (e.g. the index of each label in the sorted label names).")
    flat = labels.reshape(-1)
    if flat.dtype.kind == "f":
        bad = ~np.isfinite(flat) | (flat != np.round(flat))
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(
                f"y[{row}] is {flat[row].item()!r}, a number with a fraction (a regression "
                f"target?): a classifier takes class ids 0..{num_classes - 1}; bin the scores into "
                "classes, or train a regression head of your own.")
    outside = (flat < 0) | (flat >= num_classes)
    if outside.any():
        row = int(np.argmax(outside))
        raise ValueError(f"y[{row}] is {flat[row].item()!r}, outside the class ids 0.."
                         f"{num_classes - 1} of this {num_classes}-class classifier: give "
                         "ids in range, or build the task with more classes.")


def takes_class_ids(model):
    """Whether `model` is compiled with sparse categorical cross-entropy (its labels are
    class ids); another loss (mean squared error on a 1-class head: a regression) is
    the user's to feed."""
    loss = getattr(model, "loss", None)
    return (isinstance(loss, keras.losses.SparseCategoricalCrossentropy)
            or loss in ("sparse_categorical_crossentropy",)
            or loss is keras.losses.sparse_categorical_crossentropy)


def checked_class_ids(model, y):
    """`y`, refused in one line (`check_class_ids`) when `model` takes class ids and `y`
    holds anything else; a dataset or generator (None here) is not read."""
    if y is not None and takes_class_ids(model):
        check_class_ids(y, model.output_shape[-1])  # the logits: one per class
    return y


@keras.saving.register_keras_serializable(package="keras_ctx")
class TokenClassifier(Task):
    """One label per token (NER, POS tagging): (batch, time, num_labels) logits."""

    def __init__(self, backbone, num_labels, dropout=0.1, **kwargs):
        num_labels = validation.positive_int("num_labels", num_labels)
        dropout = validation.rate("dropout", dropout)
        inputs, features = self._backbone_features(backbone)
        hidden = Dropout(dropout, name="dropout")(features["sequence_output"])
        logits = keras.layers.Dense(num_labels, name="logits", dtype="float32")(hidden)
        super().__init__(inputs, logits, **kwargs)
        self.backbone = backbone
        self.reads_outputs("sequence_output")
        self._config = {"num_labels": num_labels, "dropout": dropout}


@keras.saving.register_keras_serializable(package="keras_ctx")
class SpanQuestionAnswerer(Task):
    """Extractive QA (SQuAD): start and end logits over tokens, (batch, time, 2).

    Padding positions get a large negative logit so no answer lands there.
    """

    def __init__(self, backbone, **kwargs):
        inputs, features = self._backbone_features(backbone)
        sequence = features["sequence_output"]
        logits = keras.layers.Dense(2, name="logits", dtype="float32")(sequence)
        mask = padding_mask_of(inputs, sequence)
        logits = MaskPadding(name="mask_padding")(logits, mask)
        super().__init__(inputs, logits, **kwargs)
        self.backbone = backbone
        self.reads_outputs("sequence_output")
        self._config = {}

    def serving_outputs(self, logits):
        return {
            "start_logits": logits[..., 0],
            "end_logits": logits[..., 1],
            "start_probabilities": ops.softmax(logits[..., 0], axis=-1),
            "end_probabilities": ops.softmax(logits[..., 1], axis=-1),
        }
