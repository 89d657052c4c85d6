"""The biLM objective of ELMo (Peters et al., 2018), generic over the backbone.

Jointly maximise the log likelihood of the forward and backward LMs:

    sum_k [ log p(t_k | t_1..t_{k-1}; Θx, Θ->, Θs) + log p(t_k | t_{k+1}..t_N; Θx, Θ<-, Θs) ]

The backbone's `sequence_output` is [forward; backward] (each half
`projection_dim` wide); both halves go through ONE shared softmax (Θs). The
training loss is the sum of both directions' mean NLL. With
`num_sampled < vocabulary_size` training uses a sampled softmax (Jean et al.,
2015; bilm-tf uses 8192 negatives) with a log-uniform (Zipfian) proposal, so
the vocabulary must be sorted by decreasing frequency, as in bilm-tf;
evaluation (`test_step`, `call`) always uses the full softmax. Metrics:
`forward_perplexity`, `backward_perplexity`, `perplexity` (both directions)
and per-direction accuracies in evaluation.

Inputs (a dict, one batch of sentences wrapped in <S> ... </S> and
right-padded): `character_ids` (batch, time, 50) and `token_ids`
(batch, time), the vocabulary ids of the same tokens, 0 for padding.
`keras_ctx.data.vocabulary.bilm_inputs` makes them from strings in tf.data.
"""

import math

import keras
from keras import ops

from keras_ctx.common import validation
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.losses import sparse_cross_entropy, top_one_correct, weighted_mean

NUM_SAMPLED = 8192  # bilm-tf's n_negative_samples_batch (Peters et al., 2018)


@keras.saving.register_keras_serializable(package="keras_ctx")
class Perplexity(keras.metrics.Metric):
    """exp(mean NLL per token), accumulated over a whole epoch."""

    def __init__(self, name="perplexity", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable((), "zeros", name="total")
        self.count = self.add_variable((), "zeros", name="count")

    def update_state(self, nll_sum, count):
        self.total.assign_add(ops.cast(nll_sum, "float32"))
        self.count.assign_add(ops.cast(count, "float32"))

    def result(self):
        return ops.exp(self.total / ops.maximum(self.count, 1.0))

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


def _targets(token_ids):
    """Forward labels t_{k+1}, backward labels t_{k-1}, and their weights."""
    ids = ops.cast(token_ids, "int32")
    real = ops.cast(ops.not_equal(ids, 0), "float32")
    pad = ops.zeros_like(ids[:, :1])
    fwd_labels = ops.concatenate([ids[:, 1:], pad], axis=1)
    bwd_labels = ops.concatenate([pad, ids[:, :-1]], axis=1)
    fwd_w = real * ops.cast(ops.not_equal(fwd_labels, 0), "float32")
    bwd_w = real * ops.cast(ops.not_equal(bwd_labels, 0), "float32")
    return fwd_labels, fwd_w, bwd_labels, bwd_w


@keras.saving.register_keras_serializable(package="keras_ctx")
class BiLMPretrainer(Pretrainer):
    """Forward + backward LM training of any backbone with [fwd; bwd] outputs.

    Args:
        backbone: a model taking {"character_ids"} (e.g. `ElmoBackbone`) and
            returning `sequence_output` (batch, time, 2 * d): forward half first.
        vocabulary_size: size of the softmax (padding id 0 included).
        num_sampled: negatives of the sampled softmax in training (8192 as in
            bilm-tf); None or >= vocabulary_size: full softmax.

    Call: `{"character_ids", "token_ids"}` -> {"forward_logits",
    "backward_logits"} (full softmax, float32).
    """

    def __init__(self, backbone, vocabulary_size, num_sampled=NUM_SAMPLED, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.vocabulary_size = int(vocabulary_size)
        self.num_sampled = validation.optional_positive_int("num_sampled", num_sampled)
        dim = backbone.output["sequence_output"].shape[-1]
        if dim % 2:
            raise ValueError(
                f"The backbone's sequence_output ({dim}) must be [forward; backward] halves."
            )
        self.dim = dim // 2
        # The softmax shared by both directions (Θs).
        self.softmax_kernel = self.add_weight(
            name="softmax_kernel", shape=(self.vocabulary_size, self.dim),
            initializer="glorot_uniform", dtype="float32",
        )
        self.softmax_bias = self.add_weight(
            name="softmax_bias", shape=(self.vocabulary_size,), initializer="zeros",
            dtype="float32",
        )
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.forward_perplexity = Perplexity(name="forward_perplexity")
        self.backward_perplexity = Perplexity(name="backward_perplexity")
        self.perplexity = Perplexity(name="perplexity")
        self.forward_accuracy = keras.metrics.Mean(name="forward_accuracy")
        self.backward_accuracy = keras.metrics.Mean(name="backward_accuracy")
        self.objective_metrics = [self.forward_perplexity, self.backward_perplexity,
                                  self.perplexity, self.forward_accuracy,
                                  self.backward_accuracy]

    @property
    def use_sampled_softmax(self):
        return self.num_sampled is not None and self.num_sampled < self.vocabulary_size

    def _directions(self, x, training):
        h = ops.cast(self.backbone({"character_ids": x["character_ids"]}, training=training)[
            "sequence_output"], "float32")
        return h[..., : self.dim], h[..., self.dim :]

    def _full_logits(self, h):
        return ops.matmul(h, ops.transpose(self.softmax_kernel)) + self.softmax_bias

    def call(self, x, training=False):
        fwd, bwd = self._directions(x, training)
        return {"forward_logits": self._full_logits(fwd), "backward_logits": self._full_logits(bwd)}

    def _log_uniform(self, ids):
        # P(k) = log((k + 2) / (k + 1)) / log(V + 1), TF's log_uniform sampler.
        k = ops.cast(ids, "float32")
        return (ops.log(k + 2.0) - ops.log(k + 1.0)) / math.log(self.vocabulary_size + 1.0)

    def sample_candidates(self):
        """`num_sampled` ids from the log-uniform distribution, with replacement."""
        u = keras.random.uniform((self.num_sampled,), seed=self.seed_generator)
        # Inverse CDF of the log-uniform distribution.
        k = ops.floor(ops.exp(u * math.log(self.vocabulary_size + 1.0)))
        sampled = ops.cast(k, "int32") - 1
        return ops.clip(sampled, 0, self.vocabulary_size - 1)

    def _sampled_nll(self, h, labels, sampled=None):
        """Sampled softmax NLL (with replacement, log Q correction, accidental hits removed).

        The same as `tf.nn.sampled_softmax_loss` with a log-uniform sampler
        (unique=False), written with ops that compile under XLA.
        """
        n = self.num_sampled
        if sampled is None:
            sampled = self.sample_candidates()
        w_true = ops.take(self.softmax_kernel, labels, axis=0)
        true_logit = ops.sum(h * w_true, -1) + ops.take(self.softmax_bias, labels)
        true_logit -= ops.log(n * self._log_uniform(labels))
        w_s = ops.take(self.softmax_kernel, sampled, axis=0)
        s_logits = ops.matmul(h, ops.transpose(w_s)) + ops.take(self.softmax_bias, sampled)
        s_logits -= ops.log(n * self._log_uniform(sampled))[None, :]
        hit = ops.equal(labels[:, None], sampled[None, :])
        s_logits = ops.where(hit, -1e9, s_logits)
        all_logits = ops.concatenate([true_logit[:, None], s_logits], axis=-1)
        return ops.logsumexp(all_logits, axis=-1) - true_logit

    def _direction_nll(self, h, labels, sampled):
        flat_h = ops.reshape(h, (-1, self.dim))
        flat_labels = ops.reshape(labels, (-1,))
        if sampled:
            return ops.reshape(self._sampled_nll(flat_h, flat_labels), ops.shape(labels)), None
        logits = self._full_logits(flat_h)
        nll = sparse_cross_entropy(flat_labels, logits)
        correct = top_one_correct(flat_labels, logits)
        return ops.reshape(nll, ops.shape(labels)), ops.reshape(correct, ops.shape(labels))

    def compute_losses(self, batch, training):
        """The sum of both directions' mean NLL; sampled softmax in training only."""
        x, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
        sampled = training and self.use_sampled_softmax
        fwd, bwd = self._directions(x, training)
        fwd_labels, fwd_w, bwd_labels, bwd_w = _targets(x["token_ids"])
        fwd_nll, fwd_ok = self._direction_nll(fwd, fwd_labels, sampled)
        bwd_nll, bwd_ok = self._direction_nll(bwd, bwd_labels, sampled)
        fwd_sum, bwd_sum = ops.sum(fwd_nll * fwd_w), ops.sum(bwd_nll * bwd_w)
        fwd_n, bwd_n = ops.sum(fwd_w), ops.sum(bwd_w)
        self.forward_perplexity.update_state(fwd_sum, fwd_n)
        self.backward_perplexity.update_state(bwd_sum, bwd_n)
        self.perplexity.update_state(fwd_sum + bwd_sum, fwd_n + bwd_n)
        if fwd_ok is not None:
            self.forward_accuracy.update_state(fwd_ok, sample_weight=fwd_w)
            self.backward_accuracy.update_state(bwd_ok, sample_weight=bwd_w)
        return {"forward": weighted_mean(fwd_nll, fwd_w),
                "backward": weighted_mean(bwd_nll, bwd_w)}

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "num_sampled": self.num_sampled,
        }
