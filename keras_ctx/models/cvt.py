"""CVT's sequence-tagging encoder and prediction modules (Clark et al. 2018).

Encoder (Sec. 3.1, 4; cvt_text's model/encoder.py): each word is
[word embedding; character CNN], then a first layer of separate forward and
backward LSTMs and a second biLSTM layer over their concatenation:

    x_t   = [s * Dropout(E w_t) ; Dropout(maxpool_chars(ReLU(CNN(c_t))))]
    h1->  = Dropout(LSTMP_fw(x)),  h1<- = Dropout(LSTMP_bw(x)),  h1 = [h1->; h1<-]
    h2    = [Dropout(LSTMP_fw2(h1)) ; Dropout(LSTMP_bw2(h1))]

s is a learned scalar (cvt_text's `emb_scale`, initialised to 1). Every
LSTM projects its output (cvt_text: `LSTMCell(size, num_proj=min(size,
projection_size))`). The dropout rate is an argument of `forward_pass`: cvt_text
drops 0.5 on labelled batches, 0.2 on unlabelled ones, nothing at test time.

Prediction modules, "NN(h) = softmax(U ReLU(W h + b) + c)" (Sec. 3.1):

    primary   p(y_t | x)      = NN([h1_t ; h2_t])
    full      p_full(y_t | x) = U (W [h1_t; h2_t] + b) + c   (no ReLU; cvt_text's 5th module)
    forward   p_fwd(y_t | x)  = NN_fwd(h1->_t)       left context, x_t included
    backward  p_bwd(y_t | x)  = NN_bwd(h1<-_t)       right context, x_t included
    future    p_fut(y_t | x)  = NN_fut(h1->_(t-1))   left context, x_t excluded
    past      p_past(y_t | x) = NN_past(h1<-_(t+1))  right context, x_t excluded

(Clark et al. 2018, Sec. 3.1, "Sequence Tagging": the restricted modules take
the first layer's outputs only, because the second layer's see both sides.)
The future module has no input at t = 0 and the past module none at the last
real token: `view_weights` leaves those positions out of their losses, as
cvt_text's rolled masks do.

Sizes (cvt_text's configure.py): 300-d word embeddings, 50-d character
embeddings with 100 filters each of widths 2, 3, 4, a 1024-cell first layer and
a 512-cell second layer per direction, every LSTM and every prediction
module's hidden layer 512 wide (`projection_size`).
"""

import keras
from keras import ops

from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder
from keras_ctx.layers.dropout import Dropout
from keras_ctx.layers.embeddings import TokenEmbedding
from keras_ctx.layers.lstm import LSTMP
from keras_ctx.models.backbone import Backbone

# Clark et al. 2018 / cvt_text configure.py.
CVT_FILTERS = ((2, 100), (3, 100), (4, 100))
PROJECTION_SIZE = 512
AUXILIARY_VIEWS = ("full", "forward", "backward", "future", "past")


@keras.saving.register_keras_serializable(package="keras_ctx")
class LearnedScale(keras.layers.Layer):
    """y = s * x with one learned scalar s (cvt_text's `emb_scale`, initialised to 1)."""

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def call(self, inputs):
        return inputs * ops.cast(self.scale, inputs.dtype)


class _RateDropout(Dropout):
    """Dropout whose rate a call may override (cvt_text's per-batch keep_prob)."""

    def __init__(self, rate, **kwargs):
        # Keras makes the seed generator only for a rate > 0; a call may raise it.
        super().__init__(0.5, **kwargs)
        self.rate = float(rate)

    def call(self, inputs, training=False, rate=None):
        if rate is None or rate == self.rate:
            return super().call(inputs, training=training)
        kept, self.rate = self.rate, float(rate)
        try:
            return super().call(inputs, training=training)
        finally:
            self.rate = kept


def _encode(layers, inputs, training=None, rate=None):
    """The encoder's computation over `layers` (the functional graph and `forward_pass`)."""
    mask = ops.cast(inputs["padding_mask"], "bool")
    drop = lambda name, x: layers[name](x, training=training, rate=rate)  # noqa: E731
    words = layers["scale"](drop("word_dropout", layers["token_embedding"](inputs["token_ids"])))
    characters = drop("character_dropout", layers["character_cnn"](inputs["character_ids"]))
    x = embedded = layers["word_and_characters"]([words, characters])
    outputs = {}
    for i in (1, 2):
        forward = drop(f"dropout_forward_{i}", layers[f"forward_lstm_{i}"](x, mask=mask))
        backward = drop(f"dropout_backward_{i}", layers[f"backward_lstm_{i}"](x, mask=mask))
        outputs[i] = (forward, backward)
        x = layers[f"bilstm_{i}"]([forward, backward])
        outputs[f"h{i}"] = x
    return {"sequence_output": layers["h1_h2"]([outputs["h1"], outputs["h2"]]),
            "hidden_states": [embedded, outputs["h1"], outputs["h2"]],
            "forward_states": outputs[1][0], "backward_states": outputs[1][1]}


@keras.saving.register_keras_serializable(package="keras_ctx")
class CvtEncoder(Backbone):
    """CVT's CNN-BiLSTM encoder (word + character-CNN embeddings, two LSTM layers).

    Args:
        vocabulary_size: word ids.
        embedding_size: word embedding width (300, GloVe).
        first_layer_size, second_layer_size: LSTM cells per direction (1024, 512).
        projection_size: every LSTM's output projection, min(cells, this) (512).
        filters: character CNN (width, count) pairs ((2,100), (3,100), (4,100)).
        character_embedding_size: 50.
        max_characters_per_token: the last dimension of `character_ids`.
        character_vocabulary_size: character ids (262: keras_ctx.data.characters).
        dropout: the rate of a plain training call (0.5, cvt_text's labelled
            rate); `forward_pass(inputs, dropout=...)` takes another.
        lstm_implementation: "auto", "loop" (XLA) or "cudnn".

    Inputs: {"token_ids", "character_ids" (batch, time, chars), "padding_mask"}.
    Outputs: {"sequence_output": [h1; h2] (the primary and full modules' input),
    "hidden_states": [x, h1, h2], "forward_states": h1->, "backward_states": h1<-}.

    References:
        Clark et al., "Semi-Supervised Sequence Modeling with Cross-View
        Training", 2018.
    """

    def __init__(self, vocabulary_size, embedding_size=300, first_layer_size=1024,
                 second_layer_size=512, projection_size=PROJECTION_SIZE, filters=CVT_FILTERS,
                 character_embedding_size=50, max_characters_per_token=50,
                 character_vocabulary_size=262, dropout=0.5, lstm_implementation="auto",
                 dtype=None, **kwargs):
        filters = [list(pair) for pair in filters]
        inputs = {
            "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
            "character_ids": keras.Input((None, max_characters_per_token), dtype="int32",
                                         name="character_ids"),
            "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
        }
        layers = {
            "token_embedding": TokenEmbedding(vocabulary_size, embedding_size, dtype=dtype,
                                              name="token_embedding"),
            "scale": LearnedScale(dtype=dtype, name="embedding_scale"),
            "character_cnn": CharCNNHighwayEmbedder(
                filters=filters, num_highway_layers=0, projection_dim=None,
                max_characters_per_token=max_characters_per_token,
                character_vocabulary_size=character_vocabulary_size,
                character_embedding_dim=character_embedding_size, dtype=dtype,
                name="character_cnn"),
            "word_and_characters": keras.layers.Concatenate(dtype=dtype,
                                                            name="word_and_characters"),
            "h1_h2": keras.layers.Concatenate(dtype=dtype, name="h1_h2"),
        }
        for name in ("word_dropout", "character_dropout", "dropout_forward_1",
                     "dropout_backward_1", "dropout_forward_2", "dropout_backward_2"):
            layers[name] = _RateDropout(dropout, dtype=dtype, name=name)
        for i, units in ((1, first_layer_size), (2, second_layer_size)):
            for direction in ("forward", "backward"):
                layers[f"{direction}_lstm_{i}"] = LSTMP(
                    units, projection_dim=min(units, projection_size),
                    reverse=direction == "backward", implementation=lstm_implementation,
                    dtype=dtype, name=f"{direction}_lstm_{i}")
            layers[f"bilstm_{i}"] = keras.layers.Concatenate(dtype=dtype, name=f"bilstm_{i}")
        super().__init__(inputs=inputs, outputs=_encode(layers, inputs), dtype=dtype, **kwargs)
        self._layers_by_role = layers
        self._token_embedding = layers["token_embedding"]
        self.vocabulary_size = vocabulary_size
        self.embedding_size = embedding_size
        self.first_layer_size = first_layer_size
        self.second_layer_size = second_layer_size
        self.projection_size = projection_size
        self.filters = filters
        self.character_embedding_size = character_embedding_size
        self.max_characters_per_token = max_characters_per_token
        self.character_vocabulary_size = character_vocabulary_size
        self.dropout = dropout
        self.lstm_implementation = lstm_implementation

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "embedding_size": self.embedding_size,
            "first_layer_size": self.first_layer_size,
            "second_layer_size": self.second_layer_size,
            "projection_size": self.projection_size,
            "filters": self.filters,
            "character_embedding_size": self.character_embedding_size,
            "max_characters_per_token": self.max_characters_per_token,
            "character_vocabulary_size": self.character_vocabulary_size,
            "dropout": self.dropout,
            "lstm_implementation": self.lstm_implementation,
        })
        return config

    @property
    def output_sizes(self):
        """(width of h1->, width of [h1; h2])."""
        first = min(self.first_layer_size, self.projection_size)
        second = min(self.second_layer_size, self.projection_size)
        return first, 2 * (first + second)

    def forward_pass(self, inputs, dropout=None, training=None):
        """The encoder's outputs with dropout rate `dropout` (default: `self.dropout`).

        cvt_text: 0.5 on labelled batches, 0.2 on unlabelled ones; `training`
        False (the teacher, evaluation) drops nothing.
        """
        inputs = {k: inputs[k] for k in ("token_ids", "character_ids", "padding_mask")}
        return _encode(self._layers_by_role, inputs, training=training, rate=dropout)

    def layer_groups(self):
        """[embeddings (words, scale, characters), LSTM layer 1, LSTM layer 2]."""
        group = lambda *names: [w for n in names for w in self.get_layer(n).weights]  # noqa: E731
        return [group("token_embedding", "embedding_scale", "character_cnn"),
                group("forward_lstm_1", "backward_lstm_1"),
                group("forward_lstm_2", "backward_lstm_2")]


@keras.saving.register_keras_serializable(package="keras_ctx")
class PredictionModule(keras.layers.Layer):
    """CVT's prediction module: logits U act(W h + b) + c (Clark et al. 2018, Sec. 3.1).

    Args:
        num_labels: output labels.
        hidden_size: the hidden layer's width (512, cvt_text's projection_size).
        activate: ReLU on the hidden layer (True); cvt_text's "full"
            auxiliary module has none.

    Call arguments:
        inputs: (batch, time, features). Returns float32 logits.
    """

    def __init__(self, num_labels, hidden_size=PROJECTION_SIZE, activate=True, **kwargs):
        kwargs.pop("dropout", None)  # configs saved before the encoder dropped the inputs
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.hidden_size = int(hidden_size)
        self.activate = bool(activate)
        self.supports_masking = True

    def build(self, input_shape):
        self.hidden = keras.layers.Dense(self.hidden_size,
                                         activation="relu" if self.activate else None,
                                         dtype=self.dtype_policy, name="hidden")
        self.hidden.build(input_shape)
        self.output_layer = keras.layers.Dense(self.num_labels, dtype="float32",
                                               name="logits")
        self.output_layer.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        self.built = True

    def call(self, inputs, training=False):
        return self.output_layer(self.hidden(inputs))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_labels,)

    def get_config(self):
        return dict(super().get_config(), num_labels=self.num_labels,
                    hidden_size=self.hidden_size, activate=self.activate)


def auxiliary_views(features):
    """The five views of the auxiliary modules (Clark et al. 2018, Sec. 3.1; cvt_text).

    `features`: the encoder's outputs. full: [h1_t; h2_t]; forward: h1->_t;
    backward: h1<-_t; future: h1->_(t-1) (zeros at t = 0); past: h1<-_(t+1)
    (zeros after the last position).
    """
    forward, backward = features["forward_states"], features["backward_states"]
    return {
        "full": features["sequence_output"],
        "forward": forward,
        "backward": backward,
        "future": ops.concatenate([ops.zeros_like(forward[:, :1]), forward[:, :-1]], axis=1),
        "past": ops.concatenate([backward[:, 1:], ops.zeros_like(backward[:, :1])], axis=1),
    }


def view_weights(padding_mask):
    """Per-view loss weights: the real tokens, less those a view has no input for.

    future at t needs a real t - 1, past a real t + 1 (cvt_text rolls the
    mask with the targets).
    """
    real = ops.cast(padding_mask, "float32")
    zeros = ops.zeros_like(real[:, :1])
    weights = {view: real for view in AUXILIARY_VIEWS}
    weights["future"] = real * ops.concatenate([zeros, real[:, :-1]], axis=1)
    weights["past"] = real * ops.concatenate([real[:, 1:], zeros], axis=1)
    return weights
