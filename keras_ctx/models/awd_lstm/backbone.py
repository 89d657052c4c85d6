"""AWD-LSTM (Merity et al. 2017), ULMFiT's language model (Howard & Ruder 2018).

    e_t   = EmbeddingDropout(E)[x_t]                      (whole words dropped, dropoute)
    h^0_t = LockedDropout_input(e_t)                      (one mask per sequence, dropouti)
    h^l   = WeightDropLSTM_l(h^(l-1))                     (DropConnect on U_l, wdrop)
            then LockedDropout_hidden between layers      (dropouth)
    logits_t = LockedDropout_output(h^L_t) E^T + b        (tied softmax, in the LM objective)

Published sizes (Merity et al. 2017, Sec. 5; ULMFiT Sec. 4): 3 layers, 400
embedding, 1150 hidden; the last layer has 400 units so that the softmax can
share E. ULMFiT's dropouts (Sec. 4): 0.4 on the output ("layers"), 0.3 between
RNN layers, 0.4 on the input embeddings, 0.05 on embedding rows, 0.5 weight
dropout on the hidden-to-hidden matrices.

`sequence_output` is the last layer's output before the output dropout (the
LM objective and the classifier head apply their own); `hidden_states` are the
(dropped) embeddings and every LSTM layer's output.
"""

import keras
from keras import ops

from keras_ctx.common.validation import positive_int
from keras_ctx.layers.dropout import EmbeddingDropout, LockedDropout
from keras_ctx.layers.embeddings import TokenEmbedding
from keras_ctx.layers.lstm import WeightDropLSTM
from keras_ctx.models.backbone import Backbone, BackbonePreset

# Howard & Ruder 2018, Sec. 4.
ULMFIT_DROPOUTS = dict(output_dropout=0.4, hidden_dropout=0.3, input_dropout=0.4,
                       embedding_dropout=0.05, weight_dropout=0.5)


@keras.saving.register_keras_serializable(package="keras_ctx")
class AwdLstmBackbone(Backbone):
    """The AWD-LSTM encoder, without its (tied) softmax.

    Args:
        vocabulary_size: number of word ids.
        embedding_size: E's width, also the last LSTM's size (400).
        hidden_size: the other LSTMs' size (1150).
        num_layers: LSTM layers (3).
        embedding_dropout: probability of dropping a word type (0.05).
        input_dropout: locked dropout on the embeddings (0.4).
        hidden_dropout: locked dropout between LSTM layers (0.3).
        weight_dropout: DropConnect on each hidden-to-hidden matrix (0.5).
        output_dropout: kept in the config for the LM head and classifier
            (0.4); the backbone does not apply it.
        lstm_implementation: "auto", "loop" (compiles under XLA) or "cudnn".

    Inputs: {"token_ids", "padding_mask"} int32 (batch, time), right padding.
    Outputs: {"sequence_output": (batch, time, embedding_size),
    "hidden_states": [embeddings, layer 1, ..., layer L]}.

    Example:
    >>> backbone = AwdLstmBackbone.from_preset("awd-lstm-wt103")
    >>> lm = keras_ctx.pretraining.AwdLstmLMPretrainer(backbone)

    References:
        Merity et al., "Regularizing and Optimizing LSTM Language Models", 2017.
        Howard & Ruder, "Universal Language Model Fine-tuning for Text
        Classification", 2018.
    """

    def __init__(self, vocabulary_size, embedding_size=400, hidden_size=1150, num_layers=3,
                 embedding_dropout=0.05, input_dropout=0.4, hidden_dropout=0.3,
                 weight_dropout=0.5, output_dropout=0.4, lstm_implementation="auto",
                 dtype=None, **kwargs):
        num_layers = positive_int("num_layers", num_layers)
        # Merity et al. 2017: uniform(-0.1, 0.1) embeddings.
        embedding = TokenEmbedding(
            vocabulary_size, embedding_size,
            embeddings_initializer=keras.initializers.RandomUniform(-0.1, 0.1),
            dtype=dtype, name="token_embedding")
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
        mask = ops.cast(padding_mask, "bool")
        x = embedding(token_ids)
        word_dropout = EmbeddingDropout(vocabulary_size, embedding_dropout, dtype=dtype,
                                        name="embedding_dropout")
        x = word_dropout(x, token_ids)
        dropouts = [LockedDropout(input_dropout, dtype=dtype, name="input_dropout")]
        x = dropouts[0](x)
        hidden_states = [x]
        lstms = []
        for l in range(num_layers):
            units = embedding_size if l == num_layers - 1 else hidden_size
            lstm = WeightDropLSTM(units, weight_dropout=weight_dropout,
                                  implementation=lstm_implementation, dtype=dtype,
                                  name=f"lstm_{l}")
            lstms.append(lstm)
            x = lstm(x, mask=mask)
            hidden_states.append(x)
            if l < num_layers - 1:
                dropouts.append(LockedDropout(hidden_dropout, dtype=dtype,
                                              name=f"hidden_dropout_{l}"))
                x = dropouts[-1](x)
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask},
                         outputs={"sequence_output": hidden_states[-1],
                                  "hidden_states": hidden_states},
                         dtype=dtype, **kwargs)
        self._word_dropout = word_dropout
        self._locked_dropouts = dropouts  # before LSTM 1, ..., before LSTM L
        self.lstms = lstms
        self.vocabulary_size = vocabulary_size
        self.embedding_size = embedding_size
        self.num_layers = num_layers
        self._token_embedding = embedding
        self.vocabulary_size = vocabulary_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.embedding_dropout = embedding_dropout
        self.input_dropout = input_dropout
        self.hidden_dropout = hidden_dropout
        self.weight_dropout = weight_dropout
        self.output_dropout = output_dropout
        self.lstm_implementation = lstm_implementation

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "embedding_size": self.embedding_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "embedding_dropout": self.embedding_dropout,
            "input_dropout": self.input_dropout,
            "hidden_dropout": self.hidden_dropout,
            "weight_dropout": self.weight_dropout,
            "output_dropout": self.output_dropout,
            "lstm_implementation": self.lstm_implementation,
        })
        return config

    def initial_states(self, batch_size):
        """Zero states [(h, c) per LSTM], each (batch_size, units) float32."""
        return [(ops.zeros((batch_size, l.units), "float32"),) * 2 for l in self.lstms]

    def forward_pass(self, inputs, states=None, training=None):
        """The same computation as calling the backbone, from given LSTM states.

        Truncated BPTT over a text stream (Merity et al. 2017, Sec. 4.1): the
        states a segment ends in start the next segment of the same rows.

        Args:
            inputs: {"token_ids", "padding_mask"} (batch, time).
            states: [(h, c) per LSTM] as from `initial_states` or a previous
                `forward_pass`; None for zero states (the plain call).
            training: dropouts on or off.

        Returns:
            The backbone's outputs plus "states": [(h, c) per LSTM] after the
            last real step.
        """
        token_ids = inputs["token_ids"]
        mask = ops.cast(inputs["padding_mask"], "bool")
        if states is not None and len(states) != len(self.lstms):
            raise ValueError(f"`states` needs one (h, c) per LSTM layer ({len(self.lstms)}), "
                             f"got {len(states)}.")
        x = self._token_embedding(token_ids)
        x = self._word_dropout(x, token_ids, training=training)
        hidden_states, final_states = [], []
        for l, lstm in enumerate(self.lstms):
            x = self._locked_dropouts[l](x, training=training)
            if l == 0:
                hidden_states.append(x)
            x, state = lstm(x, mask=mask, training=training, return_state=True,
                            initial_state=None if states is None else states[l])
            hidden_states.append(x)
            final_states.append(state)
        return {"sequence_output": x, "hidden_states": hidden_states, "states": final_states}

    def logits(self, hidden):
        """Tied softmax logits h E^T (the LM objective adds its output bias)."""
        return self._token_embedding.reverse(hidden)

    def layer_groups(self):
        """ULMFiT's groups for discriminative rates and unfreezing: [E, LSTM 1, ..., LSTM L]."""
        return [list(self._token_embedding.weights)] + [list(l.weights) for l in self.lstms]

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, embedding_size=400, hidden_size=1150,
                                 num_layers=3, **unused):
        """Parameters of `AwdLstmBackbone`: E, then per LSTM W (in x 4h), U (h x 4h), b (4h)."""
        total = vocabulary_size * embedding_size
        width = embedding_size
        for l in range(num_layers):
            units = embedding_size if l == num_layers - 1 else hidden_size
            total += 4 * units * (width + units) + 4 * units
            width = units
        return total


# ULMFiT's published English model: AWD-LSTM trained on WikiText-103 with a
# 60,000-word vocabulary (Howard & Ruder 2018, Sec. 3.1 / 4; fastai's wt103).
# Registered by keras_ctx.families.
AWD_LSTM_PRESETS = {
    "awd-lstm-wt103": BackbonePreset(
        dict(vocabulary_size=60000, embedding_size=400, hidden_size=1150, num_layers=3,
             **ULMFIT_DROPOUTS),
        "AWD-LSTM 3x1150, 400 embedding, WT-103 60k vocabulary (ULMFiT)", 44_200_800),
}
