"""Token, learned-position and factorized (ALBERT) embeddings."""

import keras
from keras import ops

from keras_ctx.common import compat
from keras_ctx import backend
from keras_ctx.layers import _checks
from keras_ctx.layers.lookup import take_rows

LOOKUPS = ("gather", "one_hot")


def check_token_ids(token_ids, vocabulary_size, name="token_ids"):
    """`token_ids`, after checking every id is in [0, vocabulary_size) (raises otherwise).

    A gather reads id -1 as the last row and XLA clamps ids past the end to
    it: both would train or serve silently on the wrong vectors. On
    TensorFlow the check holds in eager, tf.function and SavedModel graphs
    (InvalidArgumentError); on other backends it checks concrete values
    (ValueError). XLA compiles asserts away and a traced JAX step has no
    values, so compiled steps are guarded where their data enters instead
    (`keras_ctx.training.fit_resumable` checks the dataset's `*token_ids`).
    """
    if isinstance(token_ids, keras.KerasTensor):
        return token_ids
    return backend.check_token_ids(token_ids, vocabulary_size, name)


def _table_size(layer):
    """Rows of a token table: `vocabulary_size` of ours, `input_dim` of keras.layers.Embedding."""
    for attribute in ("vocabulary_size", "input_dim"):
        size = getattr(layer, attribute, None)
        if isinstance(size, int) and not isinstance(size, bool):
            return size
    return None


def _reads_token_ids(layer):
    """Whether a functional graph feeds an input named `*token_ids` straight into `layer`."""
    for node in compat.attribute(layer, "inbound_nodes"):
        for tensor in node.input_tensors:
            source = compat.attribute(tensor, "keras_history").operation
            if isinstance(source, keras.layers.InputLayer) and source.name.endswith("token_ids"):
                return True
    return False


def vocabulary_size_of(model):
    """The number of token ids `model` (or the backbones inside it) accepts, or None.

    Found without relying on layer names (Keras renames a second unnamed layer
    `token_embedding_1`): the `token_embedding` property every backbone
    exposes (read by duck typing: layers never import models), and any table
    that a functional graph feeds an input named `*token_ids` directly. None
    when there is none, or several of different sizes.
    """
    sizes = set()
    for layer in compat.flatten_layers(model, include_self=True):
        if isinstance(getattr(type(layer), "token_embedding", None), property):
            try:
                table = layer.token_embedding
            except NotImplementedError:
                table = None
            size = _table_size(table) if table is not None else None
        else:
            size = _table_size(layer) if _reads_token_ids(layer) else None
        if size is not None:
            sizes.add(size)
    return sizes.pop() if len(sizes) == 1 else None


def max_positions_of(model):
    """The fewest positions of a model's learned position embeddings, or None."""
    sizes = [layer.sequence_length for layer in compat.flatten_layers(model)
             if isinstance(layer, PositionEmbedding)]
    return min(sizes) if sizes else None


# The modes a token table quantizes to, with their abs-max value ranges.
QUANTIZED_TABLES = {"int8": (-127, 127), "int4": (-8, 7)}


@keras.saving.register_keras_serializable(package="keras_ctx")
class TokenEmbedding(keras.layers.Layer):
    """A vocabulary_size x embedding_size lookup table that can also be read in reverse.

    `reverse(hidden)` gives logits `hidden @ embeddings^T`, the output layer
    tied to the input embeddings (BERT, GPT-2, XLNet, T5's shared vocabulary).

    Args:
        vocabulary_size: number of token ids.
        embedding_size: size of each vector (Keras' `output_dim`; configs saved
            under that name still load).
        lookup: "gather" (default) or "one_hot": a one-hot matmul, which some
            TensorFlow versions compile better under XLA, TPU and
            MirroredStrategy than a gather.
        embeddings_initializer: initializer of the table.

    Call arguments:
        token_ids: int tensor of any shape.

    Returns:
        `token_ids.shape + (embedding_size,)`.

    Example:
    >>> embedding = keras_ctx.layers.TokenEmbedding(1000, 64)
    >>> vectors = embedding(np.array([[1, 2, 3]]))          # (1, 3, 64)
    >>> logits = embedding.reverse(vectors)                 # (1, 3, 1000)
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_size,
        lookup="gather",
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = _checks.positive_int("vocabulary_size", vocabulary_size)
        self.embedding_size = _checks.positive_int("embedding_size", embedding_size)
        self.lookup = _checks.one_of("lookup", lookup, LOOKUPS)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, input_shape=None):
        if self.quantization_mode in QUANTIZED_TABLES:  # built from a quantized config
            self._quantized_build(self.quantization_mode)
        else:
            self.embeddings = self.add_weight(
                name="embeddings",
                shape=(self.vocabulary_size, self.embedding_size),
                initializer=self.embeddings_initializer,
            )
        self.built = True

    def _checked_ids(self, token_ids):
        token_ids = check_token_ids(token_ids, self.vocabulary_size,
                                    f"The token ids of layer {self.name}")
        return ops.cast(token_ids, "int32")

    def call(self, token_ids):
        table = ops.cast(self.embeddings, self.compute_dtype)
        token_ids = self._checked_ids(token_ids)
        if self.lookup == "one_hot":
            one_hot = ops.one_hot(token_ids, self.vocabulary_size, dtype=self.compute_dtype)
            return ops.matmul(one_hot, table)
        # Repeated ids' gradients summed before any optimizer squares them (lookup.py).
        return take_rows(table, token_ids)

    def reverse(self, hidden):
        """Logits over the vocabulary: `hidden @ embeddings^T`."""
        if self.quantization_mode in QUANTIZED_TABLES:
            # Integer x integer products as Keras' quantized Dense: hidden quantized per row.
            values, scale = keras.quantizers.abs_max_quantize(hidden, axis=-1)
            logits = ops.cast(ops.matmul(values, ops.transpose(self._integer_table())),
                              self.compute_dtype)
            return logits / ops.cast(scale * self.embeddings_scale, self.compute_dtype)
        table = ops.cast(self.embeddings, self.compute_dtype)
        return ops.matmul(ops.cast(hidden, self.compute_dtype), ops.transpose(table))

    # Keras' post-training quantization (`model.quantize(mode)`) in the modes
    # keras.layers.Embedding (Keras 3.15) has: "int8" and "int4", one abs-max
    # scale per token row, used by both the lookup and `reverse`. int4 values
    # lie in [-8, 7], two packed per int8 byte along the vector (Keras'
    # `pack_int4`); per row also in int4 (Keras' block_size=-1: a row is one
    # block, however `config.block_size` is set). Keras' Embedding has no "float8" (nor gptq/awq) mode and
    # neither has this table: it raises NotImplementedError, which
    # `Model.quantize` turns into a warning and the table stays as it is.
    def quantize(self, mode=None, type_check=True, config=None):
        if mode not in QUANTIZED_TABLES:
            raise NotImplementedError(
                f"TokenEmbedding {self.name} quantizes to {' or '.join(QUANTIZED_TABLES)} "
                f"(as keras.layers.Embedding), not {mode!r}; in a model, its Dense layers "
                "are quantized and the table keeps its dtype.")
        if getattr(config, "weight_quantizer", None) is not None:
            raise NotImplementedError(
                f"TokenEmbedding {self.name} quantizes with per-row abs-max scales; a "
                "custom weight_quantizer is not supported for it.")
        if self.quantization_mode is not None:
            raise ValueError(f"TokenEmbedding {self.name} is already quantized "
                             f"({self.quantization_mode}); quantize a float copy.")
        values, scale = keras.quantizers.abs_max_quantize(
            self.embeddings, axis=-1, value_range=QUANTIZED_TABLES[mode], to_numpy=True)
        if mode == "int4":
            values = keras.quantizers.pack_int4(values, axis=-1)[0]
        del self.embeddings
        self._quantized_build(mode)
        self.embeddings.assign(values)
        self.embeddings_scale.assign(ops.squeeze(scale, axis=-1))
        self.dtype_policy = keras.dtype_policies.get(f"{mode}_from_{self.dtype_policy.name}")

    def _quantized_build(self, mode):
        width = self.embedding_size if mode == "int8" else (self.embedding_size + 1) // 2
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocabulary_size, width), initializer="zeros",
            dtype="int8", trainable=False)
        self.embeddings_scale = self.add_weight(
            name="embeddings_scale", shape=(self.vocabulary_size,), initializer="ones",
            trainable=False)
        self._is_quantized = True

    def _integer_table(self, rows=None):
        """The int8 values of the table (or of `rows` of it), int4 unpacked."""
        table = self.embeddings if rows is None else rows
        if self.quantization_mode == "int4":
            table = keras.quantizers.unpack_int4(table, self.embedding_size, axis=-1)
        return table

    def quantized_call(self, token_ids):
        token_ids = self._checked_ids(token_ids)
        rows = self._integer_table(ops.take(self.embeddings, token_ids, axis=0))
        scale = ops.take(self.embeddings_scale, token_ids, axis=0)
        return ops.cast(rows, self.compute_dtype) / ops.cast(scale[..., None],
                                                             self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.embedding_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_size": self.embedding_size,
                "lookup": self.lookup,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class PositionEmbedding(keras.layers.Layer):
    """Learned absolute position embeddings (BERT, GPT, GPT-2, BART).

    Args:
        sequence_length: the largest number of positions.
        initializer: initializer of the (sequence_length, dim) table.

    Call arguments:
        inputs: (batch, time, dim) tensor; only its shape is used.
        start_index: position of the first token (for cached decoding).

    Returns:
        (batch, time, dim) position vectors, broadcast over the batch.

    Example:
    >>> positions = keras_ctx.layers.PositionEmbedding(512)
    >>> x = token_vectors + positions(token_vectors)
    """

    def __init__(self, sequence_length, initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = _checks.positive_int("sequence_length", sequence_length)
        self.initializer = keras.initializers.get(
            initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        length = inputs.shape[1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.sequence_length:
                raise ValueError(
                    f"The input has {length} positions from index {start_index}, "
                    f"but `sequence_length` is {self.sequence_length}. Use a "
                    "longer sequence_length or shorter inputs."
                )
        else:
            length = ops.shape(inputs)[1]
            if not isinstance(inputs, keras.KerasTensor):
                length = backend.check_at_most(
                    start_index + length, self.sequence_length,
                    f"The input is longer than the {self.sequence_length} positions "
                    f"layer {self.name} has (max_sequence_length); shorten it.", length)
        table = ops.cast(self.position_embeddings, self.compute_dtype)
        positions = ops.slice(table, (start_index, 0), (length, ops.shape(table)[1]))
        return ops.broadcast_to(positions[None], ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class FactorizedEmbedding(keras.layers.Layer):
    """ALBERT's factorized embedding: a V x E lookup, then an E x H projection.

    Lan et al. (2020) decouple the vocabulary embedding size E from the hidden
    size H, reducing the embedding parameters from V*H to V*E + E*H. The tied
    MLM output projects hidden states back to E and reads the V x E table in
    reverse: `reverse(hidden_E)` gives `hidden_E @ embeddings^T`.

    Args:
        vocabulary_size: V.
        embedding_size: E (128 in every ALBERT size).
        hidden_size: H.
        lookup: "gather" or "one_hot", as in `TokenEmbedding`.
        embeddings_initializer, kernel_initializer: initializers.

    Call arguments:
        token_ids: int tensor (batch, time).

    Returns:
        (batch, time, hidden_size).

    Example:
    >>> embedding = keras_ctx.layers.FactorizedEmbedding(30000, 128, 768)
    >>> hidden = embedding(token_ids)                        # (batch, time, 768)
    >>> logits = embedding.reverse(head_output_of_size_128)  # (batch, time, 30000)

    References:
        Lan et al., "ALBERT: A Lite BERT for Self-supervised Learning of
        Language Representations", 2020.
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_size,
        hidden_size,
        lookup="gather",
        embeddings_initializer=None,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = _checks.positive_int("vocabulary_size", vocabulary_size)
        self.embedding_size = _checks.positive_int("embedding_size", embedding_size)
        self.hidden_size = _checks.positive_int("hidden_size", hidden_size)
        self.lookup = _checks.one_of("lookup", lookup, LOOKUPS)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, input_shape=None):
        self.token_embedding = TokenEmbedding(
            self.vocabulary_size,
            self.embedding_size,
            lookup=self.lookup,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build()
        self.projection = keras.layers.Dense(
            self.hidden_size,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="projection",
        )
        self.projection.build((None, None, self.embedding_size))
        self.built = True

    @property
    def embeddings(self):
        """The V x E table, for tied output layers."""
        return self.token_embedding.embeddings

    def call(self, token_ids):
        return self.projection(self.token_embedding(token_ids))

    def reverse(self, hidden):
        """Logits `hidden @ embeddings^T` for hidden vectors of size E."""
        return self.token_embedding.reverse(hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_size": self.embedding_size,
                "hidden_size": self.hidden_size,
                "lookup": self.lookup,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
