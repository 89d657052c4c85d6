"""XLNet's permutation language modelling (Yang et al., 2019) as a Pretrainer.

    maximize  E_z [ sum_{t > c} log p(x_{z_t} | x_{z_<t}) ]
    p(x | g) = softmax(E g + b)          (E: the tied input embeddings)

The content stream h and the query stream g run under the permutation masks
of `keras_ctx.data.permutation`; the targets are read from the query stream
(which never sees its own token). With `mem_len > 0` the content states of
each batch are the memory of the next (Transformer-XL), so consecutive
batches must continue one another: use `keras_ctx.data.xlnet_stream.text_stream`,
or XLNet's own two-segment examples (`two_segment_stream`, whose first
`reuse_len` tokens continue the previous batch's: pass the same `reuse_len`
here so that only they enter the memory, as XLNet's `_cache_mem` does).
"""

import keras
from keras import ops

from keras_ctx.backend import gathered_rows, replica_rows
from keras_ctx.pretraining.base import Pretrainer, num_replicas
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy

PLM_KEYS = ("token_ids", "padding_mask", "perm_mask", "target_mapping", "target_ids",
            "target_weights")


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLNetPretrainer(Pretrainer):
    """Permutation language modelling with memory carried across batches.

    Args:
        backbone: a backbone with XLNet's two-stream interface:
            `forward_pass(inputs, memory=None, training=None)` returning
            `query_output` (and `memory` when `backbone.mem_len > 0`),
            `initial_memory(batch_size)`, `num_layers`, `hidden_size`,
            `mem_len`, and a `token_embedding` (TokenEmbedding) for the tied
            output layer. `XLNetBackbone` has it.
        batch_size: the fixed (global) batch size of the training stream;
            needed when the backbone has memory (mem_len > 0), to hold it in
            a variable. Under a tf.distribute strategy each replica reads and
            writes its own rows of it (replica r: rows r*b .. (r+1)*b - 1 of
            b = batch_size / replicas), the rows of the global batch it gets.
        carry_memory: carry the memory from batch to batch in `fit` (True) or
            start every batch from zero memory.
        reuse_len: only the first `reuse_len` positions of each example
            enter the memory (XLNet's `reuse_len`, 256 of 512; the data's,
            `two_segment_stream`). None: all positions (`text_stream`).

    Data: dicts from `permutation_masks` (`token_ids`, `padding_mask`,
    `segment_ids`, `perm_mask`, `target_mapping`, `target_ids`,
    `target_weights`, and `is_backward` for XLNet's `bi_data` rows), batched
    with a fixed size (drop_remainder=True).

    Metrics: `loss` (mean cross-entropy over the targets) and `plm_accuracy`.
    `evaluate` starts every batch from zero memory and carries nothing.

    Example:
    >>> pretrainer = XLNetPretrainer(backbone, batch_size=8)
    >>> pretrainer.compile(keras.optimizers.Adam(1e-3), jit_compile=True)
    >>> pretrainer.fit(permutation_masks(text_stream(ids, 64, 8)), epochs=1)
    """

    def __init__(self, backbone, batch_size=None, carry_memory=True, reuse_len=None,
                 **kwargs):
        super().__init__(**kwargs)
        for name in ("forward_pass", "initial_memory", "token_embedding", "mem_len"):
            if not hasattr(backbone, name):
                raise ValueError(
                    f"XLNetPretrainer needs a backbone with XLNet's two-stream "
                    f"interface (`{name}` is missing on {type(backbone).__name__}); "
                    "use keras_ctx.models.XLNetBackbone."
                )
        if backbone.mem_len and carry_memory and batch_size is None:
            raise ValueError(
                f"The backbone keeps a memory of {backbone.mem_len} states: pass the "
                "stream's fixed `batch_size` (or carry_memory=False, or a backbone "
                "with mem_len=0)."
            )
        self.backbone = backbone
        self.batch_size = batch_size
        self.carry_memory = bool(carry_memory)
        self.reuse_len = reuse_len
        vocabulary_size = backbone.token_embedding.vocabulary_size
        # XLNet `lm_loss`: logits = g E^T + b, the embedding table tied.
        self.lm_bias = self.add_weight(
            name="lm_bias", shape=(vocabulary_size,), initializer="zeros"
        )
        self.memory = None
        if backbone.mem_len and self.carry_memory:
            self.memory = self.add_weight(
                name="memory",
                shape=(backbone.num_layers, batch_size, backbone.mem_len,
                       backbone.hidden_size),
                initializer="zeros",
                trainable=False,
                # Every replica assigns the same all-gathered value: keep the first.
                aggregation="only_first_replica",
            )
        self.accuracy_metric = TokenAccuracy(name="plm_accuracy")
        self.objective_metrics = [self.accuracy_metric]
        self.built = True

    def reset_memory(self):
        """Zeroes the carried memory (start of a new text stream)."""
        if self.memory is not None:
            self.memory.assign(ops.zeros(self.memory.shape, self.memory.dtype))

    def _check(self, x):
        if not isinstance(x, dict) or any(key not in x for key in PLM_KEYS):
            got = sorted(x) if isinstance(x, dict) else type(x).__name__
            raise ValueError(
                f"XLNetPretrainer needs dicts with {', '.join(PLM_KEYS)}; got {got}. "
                "Map the data with keras_ctx.data.permutation.permutation_masks."
            )
        batch = x["token_ids"].shape[0]
        if self.memory is not None and batch is not None and (
                batch * num_replicas() != self.batch_size):
            raise ValueError(
                f"The memory holds batches of {self.batch_size} rows but a batch has "
                f"{batch} per replica x {num_replicas()} replicas: batch the stream with "
                f"exactly batch_size={self.batch_size} and drop_remainder=True "
                "(text_stream does)."
            )

    def call(self, inputs, memory=None, training=None):
        """Logits (batch, P, vocabulary) of the targets, and the next memory (or None)."""
        outputs = self.backbone.forward_pass(inputs, memory=memory, training=training,
                                        reuse_len=self.reuse_len)
        logits = self.backbone.token_embedding.reverse(outputs["query_output"])
        logits = ops.cast(logits, "float32") + ops.cast(self.lm_bias, "float32")
        return logits, outputs.get("memory")

    def _carried_memory(self):
        """This replica's rows of the memory: a list of (rows, mem_len, hidden) per layer."""
        memory = replica_rows(self.memory, self.batch_size // num_replicas(), axis=1)
        return [memory[i] for i in range(self.backbone.num_layers)]

    def _carry(self, new_memory):
        """Stores every replica's next memory in its rows (all-gathered in replica order)."""
        new_memory = gathered_rows(ops.cast(ops.stack(new_memory), self.memory.dtype), axis=1)
        self.memory.assign(ops.stop_gradient(new_memory))

    def compute_losses(self, batch, training):
        """The PLM loss; in training with `carry_memory`, the memory moves on one batch.

        Evaluation starts every batch from zero memory and carries nothing.
        """
        x, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
        self._check(x)
        carry = training and self.memory is not None
        memory = None
        if carry:
            memory = self._carried_memory()
        elif self.backbone.mem_len:  # a fresh stream: zero memory, as XLNet starts
            memory = self.backbone.initial_memory(ops.shape(x["token_ids"])[0])
        logits, new_memory = self(x, memory=memory, training=training)
        if carry:
            self._carry(new_memory)
        self.accuracy_metric.update_state(x["target_ids"], logits,
                                          sample_weight=x["target_weights"])
        return {"plm": weighted_cross_entropy(x["target_ids"], logits, x["target_weights"])}

    def get_config(self):
        return {**super().get_config(), "batch_size": self.batch_size,
                "carry_memory": self.carry_memory, "reuse_len": self.reuse_len}
