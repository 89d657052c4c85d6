"""A backbone and its output layer: the id-level model of the text generators."""

import keras


@keras.saving.register_keras_serializable(package="keras_ctx")
class LanguageModel(keras.Model):
    """A backbone and its output layer: inputs -> next-token logits (float32).

    Args:
        backbone: a backbone with `logits(hidden)` (its tied token embedding).
        output: the backbone output the logits read ("sequence_output";
            encoder-decoders "decoder_sequence_output").
        language_id: for a causal backbone that decodes through its family's
            `decoder` (`keras_ctx.generation.causal_decoder`: XLM's CLM, whose output
            layer, PredLayer, is the decoder's and is saved with this model), the
            language its rows are written in; None: the backbone's own `logits`.
        decoder: that decoder, when the caller holds one (a checkpoint's PredLayer);
            None: made from the backbone when `language_id` is given.
    """

    def __init__(self, backbone, output="sequence_output", language_id=None, decoder=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.output_name = output
        self.language_id = language_id
        if decoder is None and language_id is not None:
            from keras_ctx import generation

            decoder = generation.causal_decoder(backbone, language_id=language_id)
        self.decoder = decoder

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)[self.output_name]
        logits = (self.backbone if self.decoder is None else self.decoder).logits(hidden)
        return keras.ops.cast(logits, "float32")

    def get_config(self):
        config = {"backbone": keras.saving.serialize_keras_object(self.backbone),
                  "output": self.output_name, "name": self.name}
        if self.language_id is not None:
            config["language_id"] = self.language_id
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
