"""What every backbone shares: config round trip and `from_preset`."""

import keras

# keras-hub's names for an encoder-decoder backbone's inputs (DESIGN.md).
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


class Backbone(keras.Model):
    """Base of the functional backbones.

    A family subclass builds its functional graph in `__init__`, passes
    `inputs`/`outputs` to `super().__init__`, and stores its constructor
    arguments in `self._config` (returned by `get_config`). It exposes the
    input-side `token_embedding` for tied output layers.
    """

    def get_config(self):
        return dict(self._config, name=self.name, trainable=self.trainable)

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @classmethod
    def from_preset(cls, name, **overrides):
        from keras_ctx.models.presets import from_preset

        model = from_preset(name, **overrides)
        if not isinstance(model, cls):
            raise ValueError(
                f"Preset {name!r} builds a {type(model).__name__}, not a {cls.__name__}."
            )
        return model

    @property
    def token_embedding(self):
        raise NotImplementedError(f"{type(self).__name__} has no token embedding.")
