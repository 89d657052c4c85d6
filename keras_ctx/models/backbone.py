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
        config = dict(config)
        adapters = config.pop("adapters", None)  # keras_ctx.adapters.adapter_state
        model = cls(**config)
        if adapters:
            from keras_ctx.adapters import restore_adapters

            restore_adapters(model, adapters)
        return model

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

    def _final_layer(self, output_name, layer_name):
        """The layer named `layer_name` if it alone makes output `output_name`, else None."""
        try:
            layer = self.get_layer(layer_name)
        except ValueError:
            return None
        outputs = self.output if isinstance(self.output, dict) else {}
        tensor = outputs.get(output_name)
        history = getattr(tensor, "_keras_history", None)
        return layer if history is not None and history[0] is layer else None

    @property
    def supports_sequence_output_at(self):
        """Whether `sequence_output_at` can skip work: the output is an encoder stack's."""
        from keras_ctx.layers.transformer import TransformerEncoderStack

        stack = self._final_layer("sequence_output", "encoder")
        if not isinstance(stack, TransformerEncoderStack):
            return False
        # The stack's last output, not an earlier layer's.
        return self.output["sequence_output"]._keras_history[2] == stack.num_layers - 1

    def sequence_output_at(self, inputs, positions, training=None):
        """`sequence_output` at `positions` only: (batch, P, hidden).

        The same values as gathering the full `sequence_output`, but the last
        encoder layer computes only these P rows (its keys and values still
        come from every position): objectives that read a few positions, as
        masked LM does, skip most of the last layer. Backbones whose output is
        not a `TransformerEncoderStack` named "encoder" compute everything and
        gather.
        """
        from keras_ctx.layers.gather import gather_positions

        if not self.supports_sequence_output_at:
            full = self(inputs, training=training)["sequence_output"]
            return gather_positions(full, positions)
        stack = self.get_layer("encoder")
        if getattr(self, "_stack_feed", None) is None:
            # A model sharing this backbone's layers, from its inputs to what it
            # feeds the encoder stack. Stored untracked: it owns no weights.
            arguments = stack._inbound_nodes[0].arguments
            tensors = {"inputs": arguments.args[0]}
            tensors.update({k: v for k, v in arguments.kwargs.items()
                            if isinstance(v, keras.KerasTensor)})
            object.__setattr__(self, "_stack_feed", keras.Model(self.input, tensors))
            object.__setattr__(self, "_stack_constants", {
                k: v for k, v in arguments.kwargs.items()
                if not isinstance(v, keras.KerasTensor)})
        feed = dict(self._stack_feed(inputs, training=training))
        outputs = stack(feed.pop("inputs"), **feed, **self._stack_constants,
                        last_layer_positions=positions, training=training)
        return outputs[-1]

    @property
    def pools_first_position(self):
        """Whether `pooled_output` is layer "pooler" applied to `sequence_output[:, 0]`."""
        pooler = self._final_layer("pooled_output", "pooler")
        if pooler is None:
            return False
        row = pooler._inbound_nodes[0].arguments.args[0]
        source = row._keras_history[0]._inbound_nodes[0].arguments.args
        return bool(source) and source[0] is self.output["sequence_output"]

    def pooled_output_from(self, first_row):
        """`pooled_output` computed from the last layer's first row (batch, hidden)."""
        if not self.pools_first_position:
            raise ValueError(f"{type(self).__name__}'s pooled output is not a pooler over "
                             "the first position.")
        return self.get_layer("pooler")(first_row)
