"""What every backbone shares: the config round trip, `token_embedding`,
`from_preset`, and the one shape of a family's analytic parameter count."""

import dataclasses
import warnings

import keras

from keras_ctx import handles
from keras_ctx.common import compat
from keras_ctx.common.keras_files import CheckedWeightFiles
from keras_ctx.models.checked_input import CheckedTokenIds
from keras_ctx.layers.adapter_sites import restore_adapters


@dataclasses.dataclass(frozen=True)
class BackbonePreset:
    """A named size of a family's backbone, as data (keras-hub's preset metadata).

    Attributes:
        config: the backbone's constructor arguments.
        description: one line for `list_presets` (the paper or release it follows).
        parameter_count: the parameters of `Backbone(**config)`, an integer
            (tests/models/test_presets.py checks it against the family's
            `analytic_parameter_count`, a build for the small sizes, and the
            published count).
    """

    config: dict
    description: str
    parameter_count: int

    def __iter__(self):
        # The family registry reads a preset as `(config, description)`.
        return iter((self.config, self.description))


# keras-hub's names for an encoder-decoder backbone's inputs (docs/design.md).
ENCODER_DECODER_INPUTS = ("encoder_token_ids", "encoder_padding_mask",
                          "decoder_token_ids", "decoder_padding_mask")


def encoder_decoder_inputs():
    """The four int32 (batch, time) inputs of an encoder-decoder backbone, by name."""
    return {name: keras.Input((None,), dtype="int32", name=name)
            for name in ENCODER_DECODER_INPUTS}


def encoder_decoder_outputs(encoder_output, decoder_output, encoder_states, decoder_states):
    """An encoder-decoder backbone's output dict (keras-hub's names, plus every layer)."""
    return {
        "encoder_sequence_output": encoder_output,
        "decoder_sequence_output": decoder_output,
        "encoder_hidden_states": encoder_states,
        "decoder_hidden_states": decoder_states,
    }


class ReadsBackboneOutputs:
    """A model over `self.backbone` (an objective, a task) that may read only some of
    its outputs: `reads_outputs(*names)` declares them once, in `__init__`, and
    `backbone_weights_unread()` gives the weights that feed only the others (BERT's
    pooler under masked LM alone or a token classifier), which no step may update.
    """

    def reads_outputs(self, *names):
        """Declares the backbone outputs this model reads (none of the backbone's
        weights is unread for a backbone that does not name its outputs'
        dependencies; keras_ctx's do: `Backbone.weights_outside`)."""
        unread = (self.backbone.weights_outside(names)
                  if hasattr(self.backbone, "weights_outside") else ())
        object.__setattr__(self, "_unread", tuple(unread))  # untracked: the backbone's

    def backbone_weights_unread(self):
        """The backbone weights no declared output reads (none unless declared)."""
        return getattr(self, "_unread", ())


# Inputs a caller may pass to any backbone: a single-segment backbone
# (RoBERTa) takes no segment_ids (every token is segment 0).
OPTIONAL_INPUTS = ("segment_ids",)


def without_absent_optional_inputs(model, inputs):
    """`inputs` less the optional ones `model` does not take.

    A functional model given a dict with an extra key warns and may match the
    rest by position: drop the key before it gets there.
    """
    if isinstance(inputs, dict) and isinstance(model.input, dict):
        return {k: v for k, v in inputs.items()
                if k in model.input or k not in OPTIONAL_INPUTS}
    return inputs


def _quantized_policies(model):
    """A DTypePolicyMap of `model`'s quantized layers by path (None: none is quantized).

    `model.quantize(mode)` changes layers, not the constructor arguments:
    `from_config` builds the model at the map's default policy and quantizes
    the layers it names again (`_quantize_as`), so the saved quantized weights
    load into the same variables.
    """
    quantized = {layer.path: layer.dtype_policy for layer in compat.flatten_layers(model)
                 if layer is not model and layer.quantization_mode is not None}
    if not quantized:
        return None
    base = model.dtype_policy
    if isinstance(base, keras.dtype_policies.DTypePolicyMap):
        base = base.default_policy
    return keras.dtype_policies.DTypePolicyMap(
        default_policy=base, policy_map={path: keras.dtype_policies.get(policy.name)
                                         for path, policy in quantized.items()})


def _quantize_as(model, policies):
    """Quantizes the layers `policies` (a DTypePolicyMap by path) names, each in its
    mode, as `model.quantize` made them. Not by passing the map as `dtype`: a layer
    then holds the whole map as its `dtype_policy`, which Keras reads as unquantized
    in places (a reloaded run could not be saved again: "Invalid dtype: object")."""
    by_mode = {}
    for path in policies:
        by_mode.setdefault(policies[path].quantization_mode, set()).add(path)
    for mode, paths in by_mode.items():
        with warnings.catch_warnings():  # "Layer X does not have a `quantize` method"
            warnings.simplefilter("ignore", UserWarning)
            model.quantize(mode, filters=lambda layer, paths=paths: layer.path in paths)


class Backbone(CheckedTokenIds, CheckedWeightFiles, keras.Model):
    """Base of the functional backbones.

    A family subclass builds its graph in `__init__`, passes `inputs`/`outputs`
    to `super().__init__`, then keeps every constructor argument as an
    attribute of the same name (`backbone.hidden_size`) and the input-side
    `_token_embedding` (for tied output layers), and writes `get_config` out
    from those attributes on top of this one's (as keras-hub's backbones).
    """

    # The adapters added after construction (keras_ctx.layers.adapter_sites records them
    # here; get_config saves them, from_config restores them).
    _adapter_state = None

    def call(self, inputs, training=None, mask=None):
        return super().call(without_absent_optional_inputs(self, inputs), training=training,
                            mask=mask)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        # Adapters added after construction (keras_ctx.peft keeps their state here).
        adapters = getattr(self, "_adapter_state", None)
        if adapters is not None:
            config["adapters"] = adapters
        quantized = _quantized_policies(self)
        if quantized is not None:
            config["dtype"] = keras.dtype_policies.serialize(quantized)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        policies = None
        if isinstance(config.get("dtype"), dict):  # a quantized backbone's DTypePolicyMap
            policies = keras.dtype_policies.deserialize(config["dtype"])
            config["dtype"] = policies.default_policy
        adapters = config.pop("adapters", None)  # keras_ctx.peft.adapter_state
        model = cls(**config)
        if policies is not None:
            _quantize_as(model, policies)
        if adapters:
            restore_adapters(model, adapters)
        return model

    @classmethod
    def from_preset(cls, handle, **overrides):
        """The backbone a handle names (`keras_ctx.handles`), checked to be a `cls`.

        Args:
            handle: a preset name (random weights), a local checkpoint or run
                directory, `hf://ORG/NAME[@REVISION]` or `kaggle://...`.
            **overrides: backbone config values to change (unknown keys raise).

        Returns:
            The backbone, with its `.tokenizer` (None for presets and ELMo).
        """
        model = handles.from_preset(handle, **overrides)
        if not isinstance(model, cls):
            raise ValueError(
                f"{handle!r} holds a {type(model).__name__}, not a {cls.__name__}: use "
                f"{type(model).__name__}.from_preset or keras_ctx.models.from_preset."
            )
        return model

    @property
    def token_embedding(self):
        """The layer that maps token ids to input vectors (tied output layers reuse it)."""
        layer = getattr(self, "_token_embedding", None)
        if layer is None:
            raise NotImplementedError(f"{type(self).__name__} has no token embedding.")
        return layer

    def _expose_encoder(self, inputs, embeddings, stack, pooler=None):
        """Declares the backbone's two halves: inputs -> `embeddings` -> `stack`.

        Encoder backbones whose `sequence_output` is the last output of the
        TransformerEncoderStack `stack` fed (`embeddings`, padding_mask) call
        this after `super().__init__`; `pooler` is the layer that makes
        `pooled_output` from the last layer's first row, if any. Then `embed`
        and `encode` run the halves separately and `sequence_output_at` can
        skip most of the last layer.
        """
        # Untracked: they share the backbone's layers and own no weights.
        object.__setattr__(self, "_embedder", keras.Model(inputs, embeddings))
        object.__setattr__(self, "_encoder_stack", stack)
        object.__setattr__(self, "_first_row_pooler", pooler)

    @property
    def supports_sequence_output_at(self):
        """Whether `sequence_output_at` can skip work (the backbone declared its halves)."""
        return getattr(self, "_embedder", None) is not None

    def embed(self, inputs, training=None):
        """What the encoder stack reads: (batch, time, hidden) embeddings of `inputs`."""
        if not self.supports_sequence_output_at:
            raise NotImplementedError(f"{type(self).__name__} does not expose its embedding.")
        return self._embedder(without_absent_optional_inputs(self._embedder, inputs),
                              training=training)

    def encode(self, embeddings, padding_mask, last_layer_positions=None, training=None):
        """Every layer's output of the encoder stack; with `last_layer_positions`
        the last layer computes only those rows (keys and values still see all)."""
        if not self.supports_sequence_output_at:
            raise NotImplementedError(f"{type(self).__name__} does not expose its encoder.")
        return self._encoder_stack(embeddings, padding_mask=padding_mask,
                                   last_layer_positions=last_layer_positions,
                                   training=training)

    def sequence_output_at(self, inputs, positions, training=None):
        """`sequence_output` at `positions` only: (batch, P, hidden).

        The same values as gathering the full `sequence_output`, but the last
        encoder layer computes only these P rows (its keys and values still
        come from every position): objectives that read a few positions, as
        masked LM does, skip most of the last layer. Backbones that do not
        declare their halves (`_expose_encoder`) compute everything and gather.
        """
        from keras_ctx.layers.gather import gather_positions

        if not self.supports_sequence_output_at:
            full = self(inputs, training=training)["sequence_output"]
            return gather_positions(full, positions)
        embeddings = self.embed(inputs, training=training)
        return self.encode(embeddings, inputs["padding_mask"], positions, training)[-1]

    def weights_outside(self, outputs):
        """The weights none of `outputs` (names of this backbone's outputs) is computed
        from, found once in the functional graph: an objective that reads only those
        outputs leaves them alone (RoBERTa's pooler under masked LM alone)."""
        used = {id(w) for w in keras.Model(self.input, [self.output[n] for n in outputs]).weights}
        return [w for w in self.weights if id(w) not in used]

    @property
    def pools_first_position(self):
        """Whether `pooled_output` is a pooler applied to `sequence_output[:, 0]`."""
        return getattr(self, "_first_row_pooler", None) is not None

    def pooled_output_from(self, first_row):
        """`pooled_output` computed from the last layer's first row (batch, hidden)."""
        if not self.pools_first_position:
            raise ValueError(f"{type(self).__name__}'s pooled output is not a pooler over "
                             "the first position.")
        return self._first_row_pooler(first_row)

