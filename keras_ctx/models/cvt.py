"""CVT's sequence-tagging encoder and prediction modules (Clark et al. 2018).

Encoder (Sec. 3.1, 4): each word is [word embedding; character CNN], then two
biLSTM layers:

    x_t   = [E w_t ; maxpool_chars(CNN(c_t))]
    h1_t  = [h1->_t ; h1<-_t] = BiLSTM_1(x)_t
    h2_t  = [h2->_t ; h2<-_t] = BiLSTM_2(h1)_t

Prediction modules, each "NN(h) = softmax(U ReLU(W h + b) + c)" (Sec. 3.1):

    primary   p(y_t | x)      = NN([h1_t ; h2_t])
    forward   p_fwd(y_t | x)  = NN_fwd(h1->_t)       left context, x_t included
    backward  p_bwd(y_t | x)  = NN_bwd(h1<-_t)       right context, x_t included
    future    p_fut(y_t | x)  = NN_fut(h1->_(t-1))   left context, x_t excluded
    past      p_past(y_t | x) = NN_past(h1<-_(t+1))  right context, x_t excluded

(Clark et al. 2018, Sec. 3.1, "Sequence Tagging": the auxiliary modules take
the first layer's outputs only, because the second layer's see both sides.)
The future module's state at t = 0 and the past module's at the last real
token are zeros (the LSTMs' start state, and the padding's zero output).

Sizes (Clark et al. 2018, Sec. 4 and cvt_text's defaults): 300-d word
embeddings, 50-d character embeddings with 100 filters each of widths 2, 3, 4,
a 1024-unit first layer and a 512-unit second layer per direction, 512-unit
hidden layers in the prediction modules, dropout 0.5.
"""

import keras
from keras import ops

from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder
from keras_ctx.layers.dropout import Dropout
from keras_ctx.layers.embeddings import TokenEmbedding
from keras_ctx.layers.lstm import LSTMP
from keras_ctx.models.backbone import Backbone

CVT_FILTERS = ((2, 100), (3, 100), (4, 100))
AUXILIARY_VIEWS = ("forward", "backward", "future", "past")


@keras.saving.register_keras_serializable(package="keras_ctx")
class CvtEncoder(Backbone):
    """CVT's CNN-BiLSTM encoder (word + character-CNN embeddings, two biLSTM layers).

    Args:
        vocabulary_size: word ids.
        embedding_size: word embedding width (300, GloVe).
        first_layer_size, second_layer_size: LSTM units per direction (1024, 512).
        filters: character CNN (width, count) pairs ((2,100), (3,100), (4,100)).
        character_embedding_size: 50.
        max_characters_per_token: the last dimension of `character_ids`.
        character_vocabulary_size: character ids (262: keras_ctx.data.characters).
        dropout: on the embeddings and on each biLSTM layer's output (0.5).
        lstm_implementation: "auto", "loop" (XLA) or "cudnn".

    Inputs: {"token_ids", "character_ids" (batch, time, chars), "padding_mask"}.
    Outputs: {"sequence_output": [h1; h2] (the primary module's input),
    "hidden_states": [x, h1, h2], "forward_states": h1->, "backward_states": h1<-}
    (the last two without dropout: the auxiliary modules apply their own).

    References:
        Clark et al., "Semi-Supervised Sequence Modeling with Cross-View
        Training", 2018.
    """

    def __init__(self, vocabulary_size, embedding_size=300, first_layer_size=1024,
                 second_layer_size=512, filters=CVT_FILTERS, character_embedding_size=50,
                 max_characters_per_token=50, character_vocabulary_size=262, dropout=0.5,
                 lstm_implementation="auto", dtype=None, **kwargs):
        filters = [list(pair) for pair in filters]
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        character_ids = keras.Input((None, max_characters_per_token), dtype="int32",
                                    name="character_ids")
        padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
        mask = ops.cast(padding_mask, "bool")
        words = TokenEmbedding(vocabulary_size, embedding_size, dtype=dtype,
                               name="token_embedding")
        characters = CharCNNHighwayEmbedder(
            filters=filters, num_highway_layers=0, projection_dim=None,
            max_characters_per_token=max_characters_per_token,
            character_vocabulary_size=character_vocabulary_size,
            character_embedding_dim=character_embedding_size, dtype=dtype,
            name="character_cnn")
        x = keras.layers.Concatenate(dtype=dtype, name="word_and_characters")(
            [words(token_ids), characters(character_ids)])
        x = Dropout(dropout, dtype=dtype, name="embedding_dropout")(x)
        hidden_states = [x]
        first_layer = None
        for i, units in enumerate((first_layer_size, second_layer_size), 1):
            forward = LSTMP(units, implementation=lstm_implementation, dtype=dtype,
                            name=f"forward_lstm_{i}")(x, mask=mask)
            backward = LSTMP(units, reverse=True, implementation=lstm_implementation,
                             dtype=dtype, name=f"backward_lstm_{i}")(x, mask=mask)
            first_layer = first_layer or (forward, backward)
            both = keras.layers.Concatenate(dtype=dtype, name=f"bilstm_{i}")(
                [forward, backward])
            x = Dropout(dropout, dtype=dtype, name=f"dropout_{i}")(both)
            hidden_states.append(x)
        super().__init__(
            inputs={"token_ids": token_ids, "character_ids": character_ids,
                    "padding_mask": padding_mask},
            outputs={
                "sequence_output": keras.layers.Concatenate(dtype=dtype, name="h1_h2")(
                    hidden_states[1:]),
                "hidden_states": hidden_states,
                "forward_states": first_layer[0],
                "backward_states": first_layer[1],
            },
            dtype=dtype, **kwargs)
        self._token_embedding = words
        self.vocabulary_size = vocabulary_size
        self.first_layer_size = first_layer_size
        self.second_layer_size = second_layer_size
        self.dropout = dropout
        self._config = {
            "vocabulary_size": vocabulary_size, "embedding_size": embedding_size,
            "first_layer_size": first_layer_size, "second_layer_size": second_layer_size,
            "filters": filters, "character_embedding_size": character_embedding_size,
            "max_characters_per_token": max_characters_per_token,
            "character_vocabulary_size": character_vocabulary_size, "dropout": dropout,
            "lstm_implementation": lstm_implementation,
        }

    @property
    def token_embedding(self):
        return self._token_embedding

    def layer_groups(self):
        """[embeddings (words, characters), biLSTM 1, biLSTM 2]."""
        group = lambda *names: [w for n in names for w in self.get_layer(n).weights]  # noqa: E731
        return [group("token_embedding", "character_cnn"),
                group("forward_lstm_1", "backward_lstm_1"),
                group("forward_lstm_2", "backward_lstm_2")]


@keras.saving.register_keras_serializable(package="keras_ctx")
class PredictionModule(keras.layers.Layer):
    """CVT's prediction module: logits U ReLU(W h + b) + c (Clark et al. 2018, Sec. 3.1).

    Args:
        num_labels: output labels.
        hidden_size: the ReLU layer's width (512).
        dropout: on the module's input.

    Call arguments:
        inputs: (batch, time, features). Returns float32 logits.
    """

    def __init__(self, num_labels, hidden_size=512, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.hidden_size = int(hidden_size)
        self.dropout = float(dropout)
        self.supports_masking = True

    def build(self, input_shape):
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.hidden = keras.layers.Dense(self.hidden_size, activation="relu",
                                         dtype=self.dtype_policy, name="hidden")
        self.hidden.build(input_shape)
        self.output_layer = keras.layers.Dense(self.num_labels, dtype="float32",
                                               name="logits")
        self.output_layer.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        self.built = True

    def call(self, inputs, training=False):
        return self.output_layer(self.hidden(self.dropout_layer(inputs, training=training)))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_labels,)

    def get_config(self):
        return dict(super().get_config(), num_labels=self.num_labels,
                    hidden_size=self.hidden_size, dropout=self.dropout)


def auxiliary_views(forward, backward):
    """The four restricted views of layer 1 (Clark et al. 2018, Sec. 3.1).

    forward: h1->_t; backward: h1<-_t; future: h1->_(t-1) (zeros at t = 0);
    past: h1<-_(t+1) (zeros after the last position).
    """
    zeros = ops.zeros_like(forward[:, :1])
    return {
        "forward": forward,
        "backward": backward,
        "future": ops.concatenate([zeros, forward[:, :-1]], axis=1),
        "past": ops.concatenate([backward[:, 1:], ops.zeros_like(backward[:, :1])], axis=1),
    }
