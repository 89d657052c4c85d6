"""ELMo (Peters et al., 2018): a character-based bidirectional language model.

    x_k        = CharCNNHighwayEmbedder(characters of token k)          # token layer
    h->_{k,j}  = LSTMP_j->(h->_{k,j-1}) (+ h->_{k,j-1} for j > 1)       # forward LM
    h<-_{k,j}  = LSTMP_j<-(h<-_{k,j-1}) (+ h<-_{k,j-1} for j > 1)       # backward LM
    ELMo_k     = gamma * sum_j s_j h_{k,j},  h_{k,0} = [x_k; x_k],  h_{k,j} = [h->; h<-]

The forward and backward LMs share the token embedder (and, in
`keras_ctx.pretraining.BiLMPretrainer`, the softmax). The forward LM at
position k sees tokens 0..k only, the backward LM tokens k..T-1 only.

`ElmoBackbone` takes `character_ids` (batch, time, 50) (see
`keras_ctx.data.characters`) and returns `sequence_output` (the top layer,
[forward; backward], 2 * projection_dim) and `hidden_states` (the 2L + 1
layers: the token layer duplicated to [x; x] as allennlp does, then each
biLSTM layer). `Elmo` mixes them with `ScalarMix` for a downstream task.
"""

import keras
from keras import ops

from keras_ctx.common import compat
from keras_ctx.layers.char_cnn import ELMO_FILTERS, CharCNNHighwayEmbedder
from keras_ctx.layers.dropout import Dropout
from keras_ctx.layers.lstm import LSTMP
from keras_ctx.layers.scalar_mix import ScalarMix
from keras_ctx.models.backbone import Backbone, BackbonePreset


@keras.saving.register_keras_serializable(package="keras_ctx")
class ElmoBackbone(Backbone):
    """The ELMo biLM without its softmax.

    Args:
        projection_dim: size of the token layer and of each LSTM's projected
            output (ELMo original: 512).
        lstm_units: LSTM cell size (ELMo original: 4096).
        num_layers: biLSTM layers L (2 in every published ELMo).
        filters: char-CNN (width, count) pairs (all published ELMos use
            `ELMO_FILTERS`, 2048 features).
        num_highway_layers: highway layers after the char CNN.
        cell_clip, projection_clip: LSTM clipping (3 in bilm-tf's options).
        use_residual: residual connections between LSTM layers (bilm-tf's
            `use_skip_connections`: not into the first layer).
        dropout: dropout on each LSTM layer's input (0.1 in bilm-tf training).
        max_characters_per_token, character_embedding_dim: char-CNN inputs.
        lstm_implementation: "loop" (XLA-compilable) or "auto" (see LSTMP;
            with projections only the loop applies).

    Inputs: {"character_ids": int (batch, time, max_characters_per_token)};
    an all-zero token row is padding.

    Outputs: {"sequence_output": (batch, time, 2 * projection_dim),
    "hidden_states": [L + 1 tensors of that shape]}.
    """

    def __init__(
        self,
        projection_dim=512,
        lstm_units=4096,
        num_layers=2,
        filters=ELMO_FILTERS,
        num_highway_layers=2,
        cell_clip=3.0,
        projection_clip=3.0,
        use_residual=True,
        dropout=0.0,
        max_characters_per_token=50,
        character_embedding_dim=16,
        lstm_implementation="loop",
        dtype=None,
        **kwargs,
    ):
        filters = [list(pair) for pair in filters]
        character_ids = keras.Input(
            shape=(None, max_characters_per_token), dtype="int32", name="character_ids"
        )
        embedder = CharCNNHighwayEmbedder(
            filters=filters,
            num_highway_layers=num_highway_layers,
            projection_dim=projection_dim,
            max_characters_per_token=max_characters_per_token,
            character_embedding_dim=character_embedding_dim,
            dtype=dtype,
            name="token_embedder",
        )
        tokens = embedder(character_ids)
        hidden_states = [
            keras.layers.Concatenate(dtype=dtype, name="token_layer")([tokens, tokens])
        ]
        forward, backward = tokens, tokens
        for j in range(num_layers):
            outputs = []
            for direction, x in (("forward", forward), ("backward", backward)):
                if dropout:
                    x = Dropout(
                        dropout, dtype=dtype, name=f"{direction}_dropout_{j}"
                    )(x)
                y = LSTMP(
                    lstm_units,
                    projection_dim=projection_dim,
                    cell_clip=cell_clip,
                    projection_clip=projection_clip,
                    reverse=direction == "backward",
                    implementation=lstm_implementation,
                    dtype=dtype,
                    name=f"{direction}_lstm_{j}",
                )(x)
                if use_residual and j > 0:
                    y = keras.layers.Add(dtype=dtype, name=f"{direction}_residual_{j}")([y, x])
                outputs.append(y)
            forward, backward = outputs
            hidden_states.append(
                keras.layers.Concatenate(dtype=dtype, name=f"bilm_layer_{j}")([forward, backward])
            )
        super().__init__(
            inputs={"character_ids": character_ids},
            outputs={"sequence_output": hidden_states[-1], "hidden_states": hidden_states},
            dtype=dtype,
            **kwargs,
        )
        self.token_embedder = embedder
        self._token_embedding = embedder
        self.projection_dim = projection_dim
        self.lstm_units = lstm_units
        self.num_layers = num_layers
        self.filters = filters
        self.num_highway_layers = num_highway_layers
        self.cell_clip = cell_clip
        self.projection_clip = projection_clip
        self.use_residual = use_residual
        self.dropout = dropout
        self.max_characters_per_token = max_characters_per_token
        self.character_embedding_dim = character_embedding_dim
        self.lstm_implementation = lstm_implementation

    def get_config(self):
        config = super().get_config()
        config.update({
            "projection_dim": self.projection_dim,
            "lstm_units": self.lstm_units,
            "num_layers": self.num_layers,
            "filters": self.filters,
            "num_highway_layers": self.num_highway_layers,
            "cell_clip": self.cell_clip,
            "projection_clip": self.projection_clip,
            "use_residual": self.use_residual,
            "dropout": self.dropout,
            "max_characters_per_token": self.max_characters_per_token,
            "character_embedding_dim": self.character_embedding_dim,
            "lstm_implementation": self.lstm_implementation,
        })
        return config

    @property
    def output_dim(self):
        return 2 * self.projection_dim

    @classmethod
    def analytic_parameter_count(cls, projection_dim, lstm_units, num_layers=2,
                                 filters=ELMO_FILTERS, num_highway_layers=2,
                                 character_embedding_dim=16, num_characters=262, **unused):
        """Analytic parameter count of `ElmoBackbone` (no softmax), for the presets table."""
        del unused
        cnn_features = sum(count for _, count in filters)
        embedder = num_characters * character_embedding_dim
        embedder += sum(w * character_embedding_dim * c + c for w, c in filters)
        embedder += num_highway_layers * 2 * (cnn_features * cnn_features + cnn_features)
        embedder += cnn_features * projection_dim + projection_dim
        lstm = 2 * projection_dim * 4 * lstm_units + 4 * lstm_units + lstm_units * projection_dim
        return embedder + 2 * num_layers * lstm


# Published bilm-tf / allennlp options files (Peters et al., 2018; allennlp ELMo page):
# small 13.6M, medium 28.0M, original 93.6M parameters without the softmax.
ELMO_PRESETS = {
    "elmo-small": BackbonePreset(
        dict(projection_dim=128, lstm_units=1024, num_highway_layers=1),
        "ELMo small (Peters et al., 2018)", 13_593_312),
    "elmo-medium": BackbonePreset(
        dict(projection_dim=256, lstm_units=2048, num_highway_layers=1),
        "ELMo medium (Peters et al., 2018)", 28_027_744),
    "elmo-original": BackbonePreset(
        dict(projection_dim=512, lstm_units=4096, num_highway_layers=2),
        "ELMo original (Peters et al., 2018)", 93_600_864),
}


def _set_trainable(model, value):
    # A functional model built with `trainable=False` (e.g. from a config)
    # does not pass the flag on to its layers: set it on every layer.
    for layer in compat.flatten_layers(model, include_self=True):
        layer.trainable = value


@keras.saving.register_keras_serializable(package="keras_ctx")
class Elmo(keras.layers.Layer):
    """ELMo features for a downstream model: `gamma * sum_j s_j h_{k,j}` (eq. 1).

    Runs a (by default frozen) `ElmoBackbone` and mixes its 2L + 1
    representations (L + 1 tensors of [forward; backward]) with a task-specific
    `ScalarMix`: softmax-normalised scalars `s_j` and a scale `gamma`, the only
    trainable weights when the backbone is frozen. Use one `Elmo` layer per
    task (or per place in a model) to learn per-task weights.

    Args:
        backbone: an `ElmoBackbone`, or a preset name (randomly initialised).
        do_layer_norm: normalise each layer before mixing (allennlp option).
        dropout: dropout on the mixed representation (allennlp uses 0.5).
        trainable_backbone: fine-tune the biLM too (False: frozen, as in the paper).

    Call arguments:
        inputs: int character ids (batch, time, 50); put
            `keras_ctx.data.characters.ElmoCharacterIds` in front for strings.

    Returns:
        (batch, time, 2 * projection_dim), with a (batch, time) mask.

    Example:
    >>> ids = keras.Input((None, 50), dtype="int32")
    >>> features = keras_ctx.models.Elmo("elmo-small")(ids)
    >>> logits = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(features))
    >>> model = keras.Model(ids, logits)

    References:
        Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(
        self, backbone, do_layer_norm=False, dropout=0.0, trainable_backbone=False, **kwargs
    ):
        super().__init__(**kwargs)
        if isinstance(backbone, str):
            backbone = ElmoBackbone.from_preset(backbone)
        elif isinstance(backbone, dict):
            backbone = keras.saving.deserialize_keras_object(backbone)
        if not isinstance(backbone, ElmoBackbone):
            raise ValueError(
                "`backbone` must be an ElmoBackbone or a preset name like "
                f"'elmo-small', got {type(backbone).__name__}."
            )
        self.backbone = backbone
        self.do_layer_norm = bool(do_layer_norm)
        self.dropout = float(dropout)
        self.trainable_backbone = bool(trainable_backbone)
        _set_trainable(self.backbone, self.trainable_backbone)
        self.scalar_mix = ScalarMix(
            backbone.num_layers + 1, do_layer_norm=self.do_layer_norm, dtype=self.dtype_policy,
            name="scalar_mix",
        )
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    @property
    def trainable(self):
        return keras.layers.Layer.trainable.fget(self)

    @trainable.setter
    def trainable(self, value):
        keras.layers.Layer.trainable.fset(self, value)
        # Keras propagates `trainable` to sublayers (e.g. when loading a
        # .keras file): keep a frozen backbone frozen.
        backbone = getattr(self, "backbone", None)
        if backbone is not None and not getattr(self, "trainable_backbone", True):
            _set_trainable(backbone, False)

    def build(self, input_shape):
        shape = (None,) + tuple(input_shape[1:-1]) + (self.backbone.output_dim,)
        self.scalar_mix.build([shape] * (self.backbone.num_layers + 1))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.backbone(
            {"character_ids": inputs}, training=training and self.trainable_backbone
        )
        mask = self.compute_mask(inputs)
        mixed = self.scalar_mix(hidden["hidden_states"], mask=mask)
        return self.dropout_layer(mixed, training=training)

    def compute_mask(self, inputs, mask=None):
        return ops.any(ops.not_equal(inputs, 0), axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.backbone.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "do_layer_norm": self.do_layer_norm,
                "dropout": self.dropout,
                "trainable_backbone": self.trainable_backbone,
            }
        )
        return config

