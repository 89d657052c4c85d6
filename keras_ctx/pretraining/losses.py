"""Token cross-entropy and accuracy over a vocabulary, written for speed.

Every objective ends in a softmax over tens of thousands of words, and on a CPU
the passes over those logits cost as much as a layer: for GPT-2's 50,257 words
at batch 16 x 127, loss + gradient + accuracy take 95 ms here against 256 ms
with TensorFlow's fused SparseSoftmaxCrossEntropyWithLogits and an argmax
accuracy under XLA (219 against 474 ms without XLA; 2-core Xeon). Both read
the logits in float32.

    CE(y, z)   = logsumexp(z) - z_y,  logsumexp(z) = m + log sum_j exp(z_j - m), m = max_j z_j
    correct(y) = z_y >= max_j z_j     (ties count as correct; argmax picks one of them)
"""

import keras
from keras import ops

from keras_ctx.backend import flat_cross_entropy, replicas_mean


def _label_logits(logits, labels):
    labels = ops.expand_dims(ops.cast(labels, "int32"), -1)
    return ops.squeeze(ops.take_along_axis(logits, labels, axis=-1), -1)


def sparse_cross_entropy(labels, logits):
    """Per-position -log softmax(logits)[label], float32, any leading shape."""
    logits = ops.cast(logits, "float32")
    labels = ops.cast(labels, "int32")
    flat = flat_cross_entropy(ops.reshape(logits, (-1, ops.shape(logits)[-1])),
                              ops.reshape(labels, (-1,)))
    return ops.reshape(flat, ops.shape(labels))


def replica_weight_total(weights):
    """sum(weights) over the global batch / num_replicas_in_sync (the local sum on one device).

    Dividing this replica's weighted sum by it, and the result by the replicas
    (the Pretrainer step does), gives the global batch's weighted mean once
    the replicas' gradients are summed: replicas with more real tokens count
    more, exactly as on one device.
    """
    return replicas_mean(ops.sum(ops.cast(weights, "float32")))


def weighted_mean(values, weights):
    """sum(values * weights) / sum(weights) over the global batch (see replica_weight_total)."""
    weights = ops.cast(weights, "float32")
    total = ops.sum(ops.cast(values, "float32") * weights)
    return total / ops.maximum(replica_weight_total(weights), 1.0)


def weighted_cross_entropy(labels, logits, weights=None):
    """Mean cross-entropy (float32) over the positions, weighted by `weights`."""
    losses = sparse_cross_entropy(labels, logits)
    if weights is None:
        return ops.mean(losses)
    return weighted_mean(losses, weights)


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
