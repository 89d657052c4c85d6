"""CoVe (McCann et al., 2017): context vectors from a machine-translation encoder.

The MT-LSTM is a 2-layer bidirectional LSTM over fixed word vectors (GloVe):

    h = MT-LSTM(GloVe(w^x))                      # CoveBackbone
    CoVe(w) = MT-LSTM(GloVe(w)),   features = [GloVe(w); CoVe(w)]   # Cove layer

It is trained as the encoder of an attentional translation model (see
`keras_ctx.pretraining.TranslationPretrainer`) whose decoder is a 2-layer
LSTM with input feeding (McCann et al., 2017, sec. 3):

    h_t^dec = LSTM([z_{t-1}; h~_{t-1}], h_{t-1}^dec)
    alpha_t = softmax(H (W_1 h_t^dec + b_1))
    h~_t    = tanh(W_2 [H^T alpha_t; h_t^dec] + b_2)
    p(y_t | X, y_<t) = softmax(W_out h~_t + b_out)

`AttentionalDecoder` implements the first three lines with one scan over time
(`keras_ctx.layers.scan_states`), so it compiles under XLA on every backend.
The encoder's LSTMs are plain (no projection), so on TensorFlow they can use
cuDNN when XLA is off (`lstm_implementation="auto"` on a GPU).
"""

import keras
import numpy as np
from keras import ops

from keras_ctx.common import compat
from keras_ctx.layers import Dropout, _checks, scan_states
from keras_ctx.layers.lstm import LSTMP
from keras_ctx.models.backbone import Backbone, BackbonePreset


@keras.saving.register_keras_serializable(package="keras_ctx")
class CoveBackbone(Backbone):
    """The MT-LSTM encoder: fixed word vectors -> 2-layer biLSTM.

    Args:
        vocabulary_size: rows of the word-vector table (id 0 = padding).
        embedding_size: size of the word vectors (300 for GloVe 840B).
        hidden_size: LSTM size per direction (300 in CoVe: outputs are 600).
        num_layers: biLSTM layers (2 in CoVe).
        embeddings: optional (vocabulary_size, embedding_size) array of word
            vectors (e.g. from `keras_ctx.data.glove.glove_matrix`) copied in
            after building; not part of the config (it is a weight).
        trainable_embeddings: False keeps the word vectors fixed, as in CoVe.
        lstm_implementation: see `LSTMP` ("auto": cuDNN on GPU without XLA).
        dropout: in training, dropout on each biLSTM layer's input (the word vectors,
            then the layer below) and on the last layer's output, as the released
            MT-LSTM's (OpenNMT-py's `-dropout`: the encoder's inputs, `nn.LSTM`'s
            between layers, its outputs); 0 builds no dropout layer.

    Inputs: {"token_ids": int (batch, time), "padding_mask": (batch, time)}.
    Outputs: {"sequence_output": (batch, time, 2 * hidden_size),
    "hidden_states": [word vectors, biLSTM layer 1, ..., layer L]}.
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_size=300,
        hidden_size=300,
        num_layers=2,
        embeddings=None,
        trainable_embeddings=False,
        lstm_implementation="auto",
        dropout=0.0,
        dtype=None,
        **kwargs,
    ):
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        embedding = keras.layers.Embedding(
            vocabulary_size, embedding_size, trainable=trainable_embeddings, dtype=dtype,
            name="word_embedding",
        )
        mask = ops.cast(padding_mask, "bool")
        x = embedding(token_ids)
        hidden_states = [x]
        for j in range(num_layers):
            # nothing to drop at 0: the graph (and saved models) as without the argument
            inputs = Dropout(dropout, dtype=dtype, name=f"dropout_{j}")(x) if dropout else x
            outputs = [
                LSTMP(hidden_size, reverse=reverse, implementation=lstm_implementation,
                      dtype=dtype, name=f"{'backward' if reverse else 'forward'}_lstm_{j}")(
                    inputs, mask=mask)
                for reverse in (False, True)
            ]
            x = keras.layers.Concatenate(dtype=dtype, name=f"bilstm_{j}")(outputs)
            hidden_states.append(x)
        if dropout:
            x = Dropout(dropout, dtype=dtype, name=f"dropout_{num_layers}")(x)
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask},
            outputs={"sequence_output": x, "hidden_states": hidden_states},
            dtype=dtype,
            **kwargs,
        )
        if embeddings is not None:
            embeddings = np.asarray(embeddings, "float32")
            if embeddings.shape != (vocabulary_size, embedding_size):
                raise ValueError(
                    f"`embeddings` has shape {embeddings.shape}, expected "
                    f"(vocabulary_size, embedding_size) = ({vocabulary_size}, {embedding_size})."
                )
            embedding.embeddings.assign(embeddings)
        self._token_embedding = embedding
        self.vocabulary_size = vocabulary_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.trainable_embeddings = trainable_embeddings
        self.lstm_implementation = lstm_implementation
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "embedding_size": self.embedding_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "trainable_embeddings": self.trainable_embeddings,
            "lstm_implementation": self.lstm_implementation,
            "dropout": self.dropout,
        })
        return config

    @property
    def output_dim(self):
        return 2 * self.hidden_size

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, embedding_size=300, hidden_size=300,
                                 num_layers=2, **unused):
        """Parameters of a CoveBackbone config: the word table, then per biLSTM layer two
        LSTMs of W (in x 4h), U (h x 4h), b (4h)."""
        del unused
        total, width = vocabulary_size * embedding_size, embedding_size
        for _ in range(num_layers):
            total += 2 * (4 * hidden_size * (width + hidden_size) + 4 * hidden_size)
            width = 2 * hidden_size
        return total


# McCann et al., 2017: GloVe 840B (300d) inputs, 2-layer biLSTM of 300 per direction.
# The published model uses GloVe's 2.2M-word table; the preset keeps a 100k
# vocabulary (load your own table with glove_matrix).
COVE_PRESETS = {
    "cove-base": BackbonePreset(
        dict(vocabulary_size=100_000, embedding_size=300, hidden_size=300, num_layers=2),
        "CoVe MT-LSTM (McCann et al., 2017), 100k-word GloVe table", 33_604_800),
}


@keras.saving.register_keras_serializable(package="keras_ctx")
class AttentionalDecoder(keras.layers.Layer):
    """CoVe's decoder: a stacked LSTM with input feeding and attention.

    See the module docstring for the equations. Runs as one scan
    (`scan_states`) over the target time steps (XLA-compilable).

    Args:
        units: LSTM size and size of h~ (the attentional hidden state).
        num_layers: stacked LSTM layers (2 in CoVe).

    Call arguments:
        inputs: target word vectors z (batch, target_time, dim) (teacher forcing:
            the previous gold words).
        encoder_outputs: H (batch, source_time, encoder_dim).
        encoder_mask: (batch, source_time), true for real source tokens.

    Returns:
        h~ (batch, target_time, units).
    """

    def __init__(self, units, num_layers=2, **kwargs):
        super().__init__(**kwargs)
        self.units = _checks.positive_int("units", units)
        self.num_layers = _checks.positive_int("num_layers", num_layers)

    def build(self, inputs_shape, encoder_outputs_shape=None, encoder_mask_shape=None):
        dim, encoder_dim = inputs_shape[-1], encoder_outputs_shape[-1]
        self.lstms = []
        for j in range(self.num_layers):
            lstm = LSTMP(
                self.units, implementation="loop", dtype=self.dtype_policy, name=f"lstm_{j}"
            )
            # Layer 0 reads [z_{t-1}; h~_{t-1}] (input feeding).
            lstm.build((None, None, dim + self.units if j == 0 else self.units))
            self.lstms.append(lstm)
        self.attention_query = keras.layers.Dense(encoder_dim, dtype=self.dtype_policy, name="w_1")
        self.attention_query.build((None, self.units))
        self.attentional = keras.layers.Dense(
            self.units, activation="tanh", dtype=self.dtype_policy, name="w_2"
        )
        self.attentional.build((None, encoder_dim + self.units))
        self.built = True

    def call(self, inputs, encoder_outputs, encoder_mask=None):
        batch = ops.shape(inputs)[0]
        H = ops.cast(encoder_outputs, "float32")
        if encoder_mask is None:
            source_mask = ops.ones(ops.shape(H)[:2], "bool")
        else:
            source_mask = ops.cast(encoder_mask, "bool")
        z = ops.transpose(ops.cast(inputs, "float32"), (1, 0, 2))  # time major
        ones = ops.ones((batch, 1), "float32")

        def step(state, z_t):
            *lstm_states, h_tilde = state
            x = ops.concatenate([z_t, h_tilde], -1)
            new_states = []
            for j, lstm in enumerate(self.lstms):
                h, c = lstm_states[2 * j], lstm_states[2 * j + 1]
                xw = ops.cast(
                    ops.matmul(ops.cast(x, self.compute_dtype),
                               ops.cast(lstm.kernel, self.compute_dtype)), "float32"
                ) + ops.cast(lstm.bias, "float32")
                h, c = lstm._step((h, c), (xw, ones))
                new_states += [h, c]
                x = h
            # alpha_t = softmax(H (W_1 h_t^dec + b_1))
            query = ops.cast(self.attention_query(x), "float32")
            scores = ops.einsum("bsd,bd->bs", H, query)
            scores = ops.where(source_mask, scores, -1e9)
            alpha = ops.softmax(scores, -1)
            context = ops.einsum("bs,bsd->bd", alpha, H)
            # h~_t = tanh(W_2 [H^T alpha_t; h_t^dec] + b_2)
            h_tilde = ops.cast(self.attentional(ops.concatenate([context, x], -1)), "float32")
            return (*new_states, h_tilde)

        zeros = ops.zeros((batch, self.units), "float32")
        init = tuple([zeros] * (2 * self.num_layers + 1))
        states = scan_states(step, init, z)
        return ops.cast(ops.transpose(states[-1], (1, 0, 2)), self.compute_dtype)

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return tuple(inputs_shape[:2]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "num_layers": self.num_layers})
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class Cove(keras.layers.Layer):
    """[GloVe(x); CoVe(x)] features from a (by default frozen) `CoveBackbone`.

    Args:
        backbone: a trained `CoveBackbone` (e.g. `TranslationPretrainer.encoder`).
        trainable_backbone: fine-tune the MT-LSTM too (default False).

    Call arguments:
        inputs: int token ids (batch, time) in the backbone's vocabulary, 0 = padding.

    Returns:
        (batch, time, embedding_size + 2 * hidden_size), with a (batch, time) mask.

    Example:
    >>> ids = keras.Input((None,), dtype="int32")
    >>> features = keras_ctx.models.Cove(encoder)(ids)
    """

    def __init__(self, backbone, trainable_backbone=False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(backbone, dict):
            backbone = keras.saving.deserialize_keras_object(backbone)
        if not isinstance(backbone, CoveBackbone):
            raise ValueError(
                f"`backbone` must be a CoveBackbone, got {type(backbone).__name__}."
            )
        self.backbone = backbone
        self.trainable_backbone = bool(trainable_backbone)
        _set_trainable(self.backbone, self.trainable_backbone)
        self.supports_masking = True

    @property
    def trainable(self):
        return keras.layers.Layer.trainable.fget(self)

    @trainable.setter
    def trainable(self, value):
        keras.layers.Layer.trainable.fset(self, value)
        backbone = getattr(self, "backbone", None)
        if backbone is not None and not getattr(self, "trainable_backbone", True):
            _set_trainable(backbone, False)

    def call(self, inputs, training=None):
        mask = ops.cast(ops.not_equal(inputs, 0), "int32")
        out = self.backbone(
            {"token_ids": inputs, "padding_mask": mask},
            training=training and self.trainable_backbone,
        )
        return ops.concatenate([out["hidden_states"][0], out["sequence_output"]], axis=-1)

    def compute_mask(self, inputs, mask=None):
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.backbone.embedding_size + self.backbone.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "trainable_backbone": self.trainable_backbone,
            }
        )
        return config


def _set_trainable(model, value):
    # A functional model built with `trainable=False` does not pass the flag
    # on to its layers: set it on every layer.
    for layer in compat.flatten_layers(model, include_self=True):
        layer.trainable = value
