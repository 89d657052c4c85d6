"""Token cross-entropy and accuracy over a vocabulary, written for speed.

Every objective ends in a softmax over tens of thousands of words, and on a CPU
the passes over those logits cost as much as a layer: for GPT-2's 50,257 words
at batch 16 x 128, TensorFlow's fused SparseSoftmaxCrossEntropyWithLogits plus
an argmax accuracy take 2.6x the time of the two functions below (XLA), 1.2x
without XLA (benchmarks/RESULTS.md). Both read the logits in float32.

    CE(y, z)   = logsumexp(z) - z_y,  logsumexp(z) = m + log sum_j exp(z_j - m), m = max_j z_j
    correct(y) = z_y >= max_j z_j     (ties count as correct; argmax picks one of them)
"""

import keras
from keras import ops


def _label_logits(logits, labels):
    labels = ops.expand_dims(ops.cast(labels, "int32"), -1)
    return ops.squeeze(ops.take_along_axis(logits, labels, axis=-1), -1)


def sparse_cross_entropy(labels, logits):
    """Per-position -log softmax(logits)[label], float32, any leading shape."""
    logits = ops.cast(logits, "float32")
    top = ops.stop_gradient(ops.max(logits, axis=-1, keepdims=True))
    log_normalizer = ops.log(ops.sum(ops.exp(logits - top), axis=-1)) + ops.squeeze(top, -1)
    return log_normalizer - _label_logits(logits, labels)


def weighted_cross_entropy(labels, logits, weights=None):
    """Mean cross-entropy (float32) over the positions, weighted by `weights`."""
    losses = sparse_cross_entropy(labels, logits)
    if weights is None:
        return ops.mean(losses)
    weights = ops.cast(weights, "float32")
    return ops.sum(losses * weights) / ops.maximum(ops.sum(weights), 1.0)


def top_one_correct(labels, logits):
    """1.0 where the label's logit is the largest (ties included), else 0.0."""
    logits = ops.cast(logits, "float32")
    return ops.cast(_label_logits(logits, labels) >= ops.max(logits, axis=-1), "float32")


@keras.saving.register_keras_serializable(package="keras_ctx")
class TokenAccuracy(keras.metrics.Mean):
    """Weighted share of positions whose label has the largest logit.

    `SparseCategoricalAccuracy` without the argmax: one max over the
    vocabulary, which XLA shares with the loss's. Ties count as correct.

    Example:
    >>> accuracy = TokenAccuracy(name="mlm_accuracy")
    >>> accuracy.update_state(labels, logits, sample_weight=weights)
    """

    def update_state(self, labels, logits, sample_weight=None):
        return super().update_state(top_one_correct(labels, logits), sample_weight=sample_weight)
